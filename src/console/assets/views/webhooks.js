/* Webhooks: incoming receipts by source and state, dead, stuck, superseded and unhandled ones,
 * sequence entities parked on a gap, and the deliveries this service sends. Each receipt and
 * delivery links to the timeline of the intent it names, found by its delivery id. */
import { apiView } from '../api.js';
import { badge, duration, errorText, mono, monoOr, when } from '../format.js';
import {
  counted,
  filterColumn,
  listSection,
  messageDetails,
  section,
  stateCountColumns,
  stateStats,
  table,
} from '../widgets.js';
import { deliveryLink } from './trace.js';

const receiptStates = [
  'pending',
  'processing',
  'waiting',
  'applied',
  'superseded',
  'duplicate',
  'unhandled',
  'dead',
];

const deliveryStates = ['pending', 'delivering', 'delivered', 'failed', 'cancelled'];

function receiptColumns(extra) {
  return [
    { title: 'Source', cell: (r) => mono(r.source) },
    { title: 'Delivery id', cell: (r) => mono(r.deliveryId, 'key') },
    { title: 'Type', cell: (r) => monoOr(r.eventType) },
    { title: 'State', cell: (r) => badge(r.state) },
    { title: 'Attempts', class: 'num', cell: (r) => String(r.attempts) },
    ...extra,
    { title: 'Received', cell: (r) => when(r.receivedAt) },
    { title: 'Body', cell: (r) => messageDetails(r.body, 'body', r.headers) },
    { title: 'Trace', cell: (r) => deliveryLink(r) },
  ];
}

const sources = {
  title: 'Incoming webhook receipts',
  columns: [
    filterColumn('Source', 'webhooks', 'source'),
    ...stateCountColumns(receiptStates, { dead: 'danger', superseded: 'warn' }),
    { title: 'Lag', cell: (s) => duration(s.oldestPendingAgeMs) },
  ],
  table: { empty: 'No receipts yet.', emptyKind: 'neutral' },
  note: 'Verified deliveries, deduplicated on (source, delivery id), processed after the answer.',
};

const deadReceipts = {
  title: counted('receipts-dead', 'Dead receipts', 'dead'),
  columns: receiptColumns([{ title: 'Last error', cell: (r) => errorText(r.lastError) }]),
  table: { rowClass: () => 'row-dead', empty: 'No dead receipts.' },
  note: 'Attempts exhausted or a permanent error. The processor’s redrive puts them back to pending.',
};

const stuckReceipts = {
  title: 'Stuck in processing',
  columns: receiptColumns([{ title: 'Lease ended', cell: (r) => when(r.nextAttemptAt) }]),
  table: { rowClass: () => 'row-stuck', empty: 'No stuck receipts.' },
  note: 'Claimed by a worker whose lease ended: it died mid-way. Another worker takes them over.',
};

const parkedEntities = {
  title: counted('entities-parked', 'Parked entities', 'parked'),
  columns: [
    { title: 'Entity', cell: (e) => mono(`${e.scope}/${e.key}`) },
    { title: 'Applied', class: 'num', cell: (e) => e.appliedVersion || '—' },
    { title: 'Missing', class: 'num', cell: (e) => e.missingVersion || '—' },
    { title: 'Waiting', class: 'num', cell: (e) => String(e.waiting) },
    { title: 'Lowest waiting', class: 'num', cell: (e) => e.lowestWaitingVersion || '—' },
    { title: 'Parked', cell: (e) => when(e.parkedAt) },
    { title: 'Reason', cell: (e) => errorText(e.reason) },
  ],
  table: { rowClass: () => 'row-warn', empty: 'No parked entities.' },
  note: 'Sequence entities whose later versions waited past the gap timeout for a missing one. They resume when it arrives, or when an operator skips it: idem webhooks skip --scope S --key K.',
};

const supersededEvents = {
  title: counted('receipts-superseded', 'Superseded events', 'superseded'),
  columns: receiptColumns([
    { title: 'Entity', cell: (r) => (r.entity ? mono(`${r.entity.scope || ''}/${r.entity.key}`) : '—') },
    { title: 'Version', class: 'num', cell: (r) => (r.entity && r.entity.version) || '—' },
    { title: 'Applied', class: 'num', cell: (r) => r.appliedVersion || '—' },
  ]),
  table: { rowClass: () => 'row-muted', empty: 'No superseded events.', emptyKind: 'neutral' },
  note: 'State events older than the version already applied to their entity: recorded, never applied.',
};

const unhandled = {
  title: 'Unhandled',
  columns: receiptColumns([]),
  table: { empty: 'No unhandled receipts.', emptyKind: 'neutral' },
  note: 'No handler existed for their type when processed; redrive them once one does.',
};

const failedDeliveryColumns = [
  { title: 'Message', cell: (d) => mono(d.messageId, 'key') },
  { title: 'Endpoint', cell: (d) => mono(d.endpointId) },
  { title: 'URL', cell: (d) => (d.url ? mono(d.url) : '—') },
  { title: 'Type', cell: (d) => (d.eventType ? mono(d.eventType) : '—') },
  { title: 'State', cell: (d) => badge(d.state, d.state === 'failed' ? 'dead' : 'parked') },
  { title: 'Attempts', class: 'num', cell: (d) => String(d.attempts) },
  { title: 'Last status', class: 'num', cell: (d) => (d.lastStatus === null ? '—' : String(d.lastStatus)) },
  { title: 'Last error', cell: (d) => errorText(d.lastError) },
  { title: 'Created', cell: (d) => when(d.createdAt) },
  // A sent delivery is traced by its message id (the receiver's delivery id), without a source.
  {
    title: 'Trace',
    cell: (d) => deliveryLink({ deliveryId: d.messageId, tenant: d.tenant }),
  },
];

const disabledEndpointColumns = [
  { title: 'Disabled endpoint', cell: (e) => mono(e.id) },
  { title: 'URL', cell: (e) => mono(e.url) },
  { title: 'Reason', cell: (e) => errorText(e.reason) },
  { title: 'Since', cell: (e) => when(e.disabledAt) },
];

/** The webhooks this service sends: counts by state, failed deliveries, disabled endpoints. */
function outgoing(data) {
  return section(
    'Outgoing deliveries',
    'Webhooks this service sends. Endpoint secrets are never shown.',
    stateStats(deliveryStates, data.deliveries.counts, 'failed'),
    table(failedDeliveryColumns, data.failedDeliveries, {
      rowClass: () => 'row-dead',
      empty: 'No failed deliveries.',
    }),
    data.disabledEndpoints.length > 0 ? table(disabledEndpointColumns, data.disabledEndpoints, {}) : null,
  );
}

export const renderWebhooks = apiView('webhooks', (data) => [
  listSection(sources, data.sources),
  listSection(deadReceipts, data.dead),
  listSection(stuckReceipts, data.stuck),
  listSection(parkedEntities, data.parked),
  listSection(supersededEvents, data.superseded),
  listSection(unhandled, data.unhandled),
  outgoing(data),
]);
