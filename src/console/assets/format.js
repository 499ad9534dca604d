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

export function badge(text, kind) {
  return h('span', { class: `badge badge-${kind || text}` }, text);
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
