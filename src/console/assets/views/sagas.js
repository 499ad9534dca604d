/* Sagas: counts by status, stuck sagas (an operator must act) and stalled ones, with their steps. */
import { apiView } from '../api.js';
import { h } from '../dom.js';
import { filterForm, tenantFilter } from '../filters.js';
import { badge, duration, errorText, mono, muted } from '../format.js';
import { countedTitle, details, preview, section, stateStats, table } from '../widgets.js';
import { intentLink } from './trace.js';

const statuses = ['running', 'compensating', 'completed', 'compensated', 'stuck'];

const stepColumns = [
  { title: '#', class: 'num', cell: (st) => String(st.position) },
  { title: 'Step', cell: (st) => mono(st.name) },
  { title: 'State', cell: (st) => badge(st.state) },
  {
    title: 'Compensation attempts',
    class: 'num',
    cell: (st) =>
      st.compensationAttempts > 0
        ? h('span', { class: 'danger-text' }, String(st.compensationAttempts))
        : '0',
  },
  { title: 'Action key', cell: (st) => mono(st.actionKey, 'key') },
  {
    title: 'Compensation key',
    cell: (st) => (st.compensationKey ? mono(st.compensationKey, 'key') : muted('none')),
  },
  { title: 'Result', cell: (st) => details('show', preview(st.result)) },
];

/** Sagas are few and need their steps at a glance: one card each rather than a table row. */
function sagaCards(rows, kind, empty) {
  if (rows.length === 0) return h('p', { class: 'empty ok' }, empty);
  return h(
    'div',
    { class: 'items' },
    rows.map((s) =>
      h(
        'article',
        { class: `item item-${kind}`, dataset: { saga: s.key } },
        h(
          'header',
          { class: 'item-head' },
          badge(s.status, s.status === 'stuck' ? 'stuck' : s.status),
          h('span', { class: 'item-title' }, mono(s.tenant), ' / ', mono(s.saga), ' / ', mono(s.key)),
          h(
            'span',
            { class: 'item-meta' },
            `cursor ${s.cursor} · fence ${s.fence} · idle ${duration(s.idleMs)}`,
          ),
          intentLink(s.intent),
        ),
        s.stuckError || s.error ? h('p', { class: 'item-error' }, errorText(s.stuckError || s.error)) : null,
        s.stuckError && s.error
          ? h('p', { class: 'muted small item-cause' }, `Turned back after: ${s.error}`)
          : null,
        table(stepColumns, s.steps, { empty: 'No step started.', emptyKind: 'neutral' }),
        details('Input', preview(s.input, 'input')),
      ),
    ),
  );
}

export const renderSagas = apiView('sagas', (data, params) => [
  section(
    'Sagas',
    'Steps with compensations persisted before they run.',
    filterForm(
      [tenantFilter, { name: 'saga', label: 'Saga', placeholder: 'exact saga name' }],
      params,
      'sagas',
    ),
    stateStats(statuses, data.counts, 'stuck'),
  ),
  section(
    countedTitle('sagas-stuck', 'Stuck sagas', data.stuck.length, 'stuck'),
    'A compensation kept failing: an operator must fix the cause and retry the saga.',
    sagaCards(data.stuck, 'stuck', 'No stuck sagas.'),
  ),
  section(
    'Stalled',
    'Running or compensating with a lapsed lease: the process died. Recovery resumes them from their durable cursor.',
    sagaCards(data.stalled, 'warn', 'No stalled sagas.'),
  ),
]);
