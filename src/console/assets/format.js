/* Values as an operator reads them: durations, times, counts, badges, code and errors. */
import { h } from './dom.js';

export function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  const abs = Math.abs(ms);
  if (abs < 1000) return `${Math.round(abs)} ms`;
  const s = Math.floor(abs / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours}h ${m % 60}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

/** A timestamp as "3m 12s ago" / "in 20s", with the exact time on hover. */
export function when(iso) {
  if (!iso) return muted('—');
  const ms = Date.now() - Date.parse(iso);
  const text = ms >= 0 ? `${duration(ms)} ago` : `in ${duration(-ms)}`;
  return h('time', { datetime: iso, title: iso }, text);
}

/**
 * A badge's colour by the state it names: finished well (ok), under way (info), wants a look (warn),
 * broken (danger). A state not listed (superseded, duplicate, cancelled, neutral…) stays grey.
 */
const badgeTones = {
  ok: ['completed', 'applied', 'processed', 'delivered', 'done', 'compensated'],
  info: ['pending', 'ready', 'running', 'processing', 'waiting', 'claimed', 'registered', 'delivering'],
  warn: ['failed', 'compensating', 'unhandled', 'parked'],
  danger: ['stuck', 'dead'],
};
const toneOf = new Map(
  Object.entries(badgeTones).flatMap(([tone, states]) => states.map((state) => [state, tone])),
);

/** A badge showing `text`, coloured as the state `kind` (default: the text itself is the state). */
export function badge(text, kind) {
  const tone = toneOf.get(kind || text);
  return h('span', { class: tone ? `badge badge-${tone}` : 'badge' }, text);
}

export function mono(text, extra) {
  return h('code', { class: `mono ${extra || ''}`, title: text }, text);
}

export function count(n) {
  return typeof n === 'number' ? n.toLocaleString('en-US') : '—';
}

export function errorText(text) {
  return text ? h('span', { class: 'error-text', title: text }, text) : muted('—');
}

export function muted(text) {
  return h('span', { class: 'muted' }, text);
}

/** `text` in monospace, or a muted dash when there is none. */
export function monoOr(text) {
  return text ? mono(text) : muted('—');
}

/** A count, in the colour of `kind` (danger, warn) when there is any. */
export function flaggedCount(n, kind) {
  return n > 0 && kind ? h('span', { class: `${kind}-text` }, count(n)) : count(n);
}
