/* The blocks every view is made of: sections, tables, stats, previews of stored bodies, flashes. */
/* global document */
import { h, link } from './dom.js';
import { badge, count, flaggedCount, mono, muted } from './format.js';

/** A stored body or JSON text: pretty JSON, text, or a hex dump, with its size. */
export function preview(p, label) {
  if (!p) return muted('none');
  const caption = `${label ? `${label} · ` : ''}${count(p.bytes)} bytes${p.encoding === 'hex' ? ' · binary (hex)' : ''}${
    p.truncated ? ' · truncated' : ''
  }`;
  return h(
    'figure',
    { class: 'preview' },
    h('figcaption', {}, caption),
    h('pre', { class: `code ${p.encoding}` }, p.json !== undefined ? p.json : p.text),
  );
}

/** A collapsed preview for table cells. */
export function details(summary, content) {
  return h('details', { class: 'cell-details' }, h('summary', {}, summary), content);
}

export function headersTable(headers) {
  if (!headers || headers.length === 0) return muted('none');
  return h(
    'table',
    { class: 'kv' },
    h(
      'tbody',
      {},
      headers.map(([name, value]) =>
        h('tr', {}, h('th', {}, name), h('td', { class: value === '[redacted]' ? 'muted' : '' }, value)),
      ),
    ),
  );
}

/**
 * A table. `columns`: [{ title, cell(row) => node|string, class? }]. `rowClass(row)` marks rows
 * (stuck, dead). `empty`: text when there are no rows.
 */
export function table(columns, rows, options) {
  const opts = options || {};
  if (!rows || rows.length === 0)
    return h('p', { class: `empty ${opts.emptyKind || 'ok'}` }, opts.empty || 'Nothing here.');
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: 'grid' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          columns.map((c) => h('th', { class: c.class || '' }, c.title)),
        ),
      ),
      h(
        'tbody',
        {},
        rows.map((row) =>
          h(
            'tr',
            { class: opts.rowClass ? opts.rowClass(row) || '' : '' },
            columns.map((c) => h('td', { class: c.class || '' }, c.cell(row))),
          ),
        ),
      ),
    ),
  );
}

export function section(title, note, ...content) {
  return h(
    'section',
    { class: 'panel' },
    h(
      'div',
      { class: 'panel-head' },
      h('h2', {}, title),
      note ? h('p', { class: 'panel-note' }, note) : null,
    ),
    ...content,
  );
}

/**
 * A section listing `rows` in a table, as `list` describes it: its `title` (text, or `counted`'s),
 * `note` and `columns`, and `table`, the table's options (`rowClass`, `empty`, `emptyKind`).
 * `above`: what stands between the note and the table (filters, stats, actions).
 */
export function listSection(list, rows, ...above) {
  const { title } = list;
  const heading =
    typeof title === 'string' ? title : countedTitle(title.id, title.label, rows.length, title.kind);
  return section(heading, list.note, ...above, table(list.columns, rows, list.table));
}

/** A `listSection` title that counts the rows (a badge coloured `kind`) and anchors the section (`id`). */
export function counted(id, label, kind) {
  return { id, label, kind };
}

/** A section title with an anchor id and, when there are any, a badge counting its rows. */
export function countedTitle(id, label, n, kind) {
  return h('span', { id }, `${label} `, n > 0 ? badge(String(n), kind) : null);
}

export function stat(label, value, kind) {
  return h(
    'div',
    { class: `stat ${kind || ''}` },
    h('span', { class: 'stat-value' }, value),
    h('span', { class: 'stat-label' }, label),
  );
}

/**
 * A column of names (`row[field]`), each a link to `route` filtered to it, within `params` (the
 * filters already set, when the view keeps them).
 */
export function filterColumn(title, route, field, params) {
  return { title, cell: (row) => link(route, { ...params, [field]: row[field] }, mono(row[field])) };
}

/** A numeric column of `row[field]`, in the colour of `flag` (danger, warn) when there is any. */
export function countColumn(title, field, flag) {
  return { title, class: 'num', cell: (row) => flaggedCount(row[field], flag) };
}

/** A numeric column per state, counted from each row's `counts`; `flags[state]` colours a count. */
export function stateCountColumns(states, flags) {
  return states.map((state) => ({
    title: state,
    class: 'num',
    cell: (row) => flaggedCount(row.counts[state] || 0, flags[state]),
  }));
}

/** A stat per state, from `counts`; a count of the `alarm` state shows as danger. */
export function stateStats(states, counts, alarm) {
  return h(
    'div',
    { class: 'stats' },
    states.map((state) =>
      stat(state, count(counts[state] || 0), state === alarm && counts[state] > 0 ? 'danger' : ''),
    ),
  );
}

/** A message's body and headers, collapsed in a table cell. */
export function messageDetails(body, label, headers) {
  return details('show', h('div', {}, preview(body, label), h('h4', {}, 'Headers'), headersTable(headers)));
}

/** Term and value pairs (falsy entries skipped). */
export function facts(entries) {
  return h(
    'dl',
    { class: 'facts' },
    entries
      .filter(Boolean)
      .map(([term, value]) => h('div', { class: 'fact' }, h('dt', {}, term), h('dd', {}, value))),
  );
}

/** A message above the current view: the outcome of an action. */
export function flash(message, kind) {
  const el = h('div', { class: `flash flash-${kind || 'ok'}`, role: 'status' }, message);
  document.getElementById('view').prepend(el);
  return el;
}
