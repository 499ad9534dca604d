/* Keyed requests: the list, newest first, with its filters and "Load more". */
import { api } from '../api.js';
import { h, link } from '../dom.js';
import { agePresets, filterForm, tenantFilter } from '../filters.js';
import { badge, duration, mono, monoOr, muted, when } from '../format.js';
import { flash, section, table } from '../widgets.js';
import { intentLink } from './trace.js';

/** A request's state; a pending one whose lease lapsed is `stuck`, a failed one was refused. */
export function stateBadge(row) {
  if (row.stuck) return badge('stuck', 'stuck');
  if (row.state === 'failed') return badge('refused', 'failed');
  return badge(row.state);
}

function lease(row) {
  if (row.state !== 'pending') return muted('—');
  if (!row.lockedUntil) return badge('no lease', 'stuck');
  const ms = Date.parse(row.lockedUntil) - Date.now();
  return ms > 0
    ? h('span', { title: row.lockedUntil }, `held, ${duration(ms)} left`)
    : h('span', { class: 'danger-text', title: row.lockedUntil }, `lapsed ${duration(-ms)} ago`);
}

const requestColumns = [
  { title: 'State', cell: stateBadge },
  { title: 'Tenant', cell: (r) => mono(r.tenant) },
  { title: 'Operation', cell: (r) => mono(r.operation) },
  {
    title: 'Key',
    cell: (r) =>
      link('request', { tenant: r.tenant, operation: r.operation, key: r.key }, mono(r.key, 'key')),
  },
  {
    title: 'HTTP',
    class: 'num',
    cell: (r) => (r.status === null ? muted('—') : String(r.status)),
  },
  { title: 'Fence', class: 'num', cell: (r) => String(r.fence) },
  { title: 'Lease', cell: lease },
  {
    title: 'Recovery point',
    cell: (r) => monoOr(r.recoveryPoint),
  },
  { title: 'Created', cell: (r) => when(r.createdAt) },
  { title: 'Completed', cell: (r) => when(r.completedAt) },
  // Every request is an intent: its timeline across the modules.
  { title: 'Trace', cell: (r) => intentLink(r) },
];
const requestRowClass = (r) => (r.stuck ? 'row-stuck' : '');

export async function renderRequests(params) {
  const data = await api('requests', params);
  let next = data.next;
  const list = table(requestColumns, data.rows, {
    rowClass: requestRowClass,
    empty: 'No keyed requests match these filters.',
    emptyKind: 'neutral',
  });
  const more = next
    ? h(
        'button',
        {
          class: 'btn',
          type: 'button',
          id: 'load-more',
          onclick: async (event) => {
            const button = event.currentTarget;
            button.disabled = true;
            try {
              const page = await api('requests', { ...params, cursor: next });
              const rows = table(requestColumns, page.rows, { rowClass: requestRowClass });
              list.querySelector('tbody').append(...rows.querySelectorAll('tbody tr'));
              next = page.next;
              if (next) button.disabled = false;
              else button.remove();
            } catch (error) {
              button.disabled = false;
              flash(`Could not load more: ${error.message}`, 'error');
            }
          },
        },
        'Load more',
      )
    : null;
  const stuck = data.rows.filter((r) => r.stuck).length;
  return [
    section(
      'Keyed requests',
      'Every (tenant, operation, key) idem has seen, newest first. Filters match exactly.',
      filterForm(
        [
          tenantFilter,
          { name: 'operation', label: 'Operation', placeholder: 'exact operation' },
          {
            name: 'state',
            label: 'State',
            options: [
              ['', 'Any state'],
              ['pending', 'Pending'],
              ['stuck', 'Stuck (lease lapsed)'],
              ['completed', 'Completed'],
              ['failed', 'Refused'],
            ],
          },
          { name: 'age', label: 'Age', options: agePresets },
        ],
        params,
        'requests',
      ),
      stuck > 0
        ? h(
            'p',
            { class: 'callout callout-danger' },
            `${stuck} pending operation${stuck === 1 ? '' : 's'} on this page ${stuck === 1 ? 'has' : 'have'} a lapsed lease: the process died or gave up. A retry with the same key resumes from the recovery point.`,
          )
        : null,
      list,
      more ? h('div', { class: 'more' }, more) : null,
    ),
  ];
}
