/* Claims (tasks): counts per queue, claims whose lease lapsed, dead tasks. */
import { apiView } from '../api.js';
import { h } from '../dom.js';
import { filterForm, tenantFilter } from '../filters.js';
import { badge, duration, errorText, mono, when } from '../format.js';
import { counted, details, filterColumn, listSection, preview, stateCountColumns } from '../widgets.js';
import { intentLink } from './trace.js';

const taskStates = ['ready', 'claimed', 'completed', 'dead'];

function taskColumns(extra) {
  return [
    { title: 'Task', class: 'num', cell: (t) => `#${t.id}` },
    { title: 'Tenant', cell: (t) => mono(t.tenant) },
    { title: 'Queue', cell: (t) => mono(t.queue) },
    { title: 'Key', cell: (t) => mono(t.key, 'key') },
    { title: 'State', cell: (t) => badge(t.state) },
    { title: 'Attempts', class: 'num', cell: (t) => `${t.attempts} / ${t.maxAttempts}` },
    ...extra,
    { title: 'Payload', cell: (t) => details('show', preview(t.payload, 'payload')) },
    { title: 'Intent', cell: (t) => intentLink(t.intent) },
  ];
}

/** The queues with their counts per state; a queue links to its tasks, within the same filters. */
const queues = (params) => ({
  title: 'Claims',
  columns: [
    filterColumn('Queue', 'tasks', 'queue', params),
    ...stateCountColumns(taskStates, { dead: 'danger' }),
    { title: 'Oldest due', cell: (q) => duration(q.oldestDueAgeMs) },
  ],
  table: { empty: 'No tasks.', emptyKind: 'neutral' },
  note: 'Tasks for polling workers: one per (tenant, queue, key), claimed with a lease and a fencing token.',
});

const stuckClaims = {
  title: counted('tasks-stuck', 'Stuck claims', 'stuck'),
  columns: taskColumns([
    { title: 'Worker', cell: (t) => (t.lockedBy ? mono(t.lockedBy) : '—') },
    { title: 'Fence', class: 'num', cell: (t) => String(t.fence) },
    { title: 'Lease ended', cell: (t) => h('span', { class: 'danger-text' }, when(t.visibleAt)) },
  ]),
  table: { rowClass: () => 'row-stuck', empty: 'No stuck claims.' },
  note: 'Claimed, but the lease ended without a heartbeat: the worker died or hangs. The next claim takes the task over with a higher fence; the old worker’s writes are refused.',
};

const deadTasks = {
  title: counted('tasks-dead', 'Dead tasks', 'dead'),
  columns: taskColumns([
    { title: 'Last error', cell: (t) => errorText(t.lastError) },
    { title: 'Died', cell: (t) => when(t.finishedAt) },
  ]),
  table: { rowClass: () => 'row-dead', empty: 'No dead tasks.' },
  note: 'Attempts exhausted or a permanent error. Their dedupe key holds until they are swept.',
};

export const renderTasks = apiView('tasks', (data, params) => [
  listSection(
    queues(params),
    data.queues,
    filterForm(
      [tenantFilter, { name: 'queue', label: 'Queue', placeholder: 'exact queue' }],
      params,
      'tasks',
    ),
  ),
  listSection(stuckClaims, data.stuck),
  listSection(deadTasks, data.dead),
]);
