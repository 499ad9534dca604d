/**
 * The Prometheus gauges read from idem's snapshot, as data: each gauge's name (after the prefix),
 * its help text, and the snapshot count it reports. One table, so adding a count to the snapshot
 * and exporting it is one line here, and the order of the exposition is the order of the rows.
 */
import type { IdemSnapshot } from './snapshot.js';

export interface SnapshotGauge {
  /** The metric name without the prefix (`idem_` by default). */
  name: string;
  help: string;
  /** The gauge's value in one snapshot; null (no such row) is exported as 0. */
  read: (snapshot: IdemSnapshot) => number | null;
}

export const snapshotGauges: readonly SnapshotGauge[] = [
  {
    name: 'outbox_backlog',
    help: 'Outbox events not yet published (excluding dead)',
    read: (s) => s.outbox.backlog,
  },
  {
    name: 'outbox_lag_seconds',
    help: 'Age of the oldest unpublished outbox event',
    read: (s) => (s.outbox.lagMs === null ? 0 : s.outbox.lagMs / 1000),
  },
  {
    name: 'outbox_retrying',
    help: 'Unpublished outbox events whose publish failed at least once',
    read: (s) => s.outbox.retrying,
  },
  {
    name: 'outbox_dead',
    help: 'Outbox events parked as dead after their last attempt',
    read: (s) => s.outbox.dead,
  },
  {
    name: 'inbox_dead',
    help: 'Inbox messages recorded as dead',
    read: (s) => s.inbox.dead,
  },
  {
    name: 'webhook_receipts_backlog',
    help: 'Webhook receipts pending or being processed',
    read: (s) => s.receipts.backlog,
  },
  {
    name: 'webhook_receipts_stuck',
    help: 'Webhook receipts being processed past their due time (the worker that claimed them is gone)',
    read: (s) => s.receipts.stuck,
  },
  {
    name: 'webhook_receipts_dead',
    help: 'Webhook receipts dead-lettered',
    read: (s) => s.receipts.dead,
  },
  {
    name: 'webhook_receipts_superseded',
    help: 'Webhook receipts recorded as superseded (state events older than the applied version)',
    read: (s) => s.receipts.superseded,
  },
  {
    name: 'webhook_receipts_waiting',
    help: 'Webhook receipts waiting for their entity (busy, or an earlier sequence version missing)',
    read: (s) => s.receipts.waiting,
  },
  {
    name: 'webhook_entities_parked',
    help: 'Sequence entities parked on a gap: a later version waited past the gap timeout for a missing one',
    read: (s) => s.receipts.parked,
  },
  {
    name: 'webhook_deliveries_failed',
    help: 'Webhooks to send whose last attempt failed for good',
    read: (s) => s.deliveries.failed,
  },
  {
    name: 'tasks_stuck',
    help: 'Claimed tasks whose lease lapsed (the worker is gone)',
    read: (s) => s.tasks.stuck,
  },
  {
    name: 'tasks_dead',
    help: 'Claimed tasks dead-lettered',
    read: (s) => s.tasks.dead,
  },
  {
    name: 'requests_stuck',
    help: 'Pending keyed operations that nobody holds: their lease lapsed',
    read: (s) => s.requests.stuck,
  },
  {
    name: 'sagas_stuck',
    help: "Sagas whose compensation could not finish (an operator's)",
    read: (s) => s.sagas.stuck,
  },
  {
    name: 'sagas_stalled',
    help: 'Running sagas that nobody holds: their lease lapsed',
    read: (s) => s.sagas.stalled,
  },
  {
    name: 'intents_waiting',
    help: 'Pending defined operations (idem.define): running, or waiting for the completer',
    read: (s) => s.intents.waiting,
  },
  {
    name: 'intents_retrying',
    help: 'Pending defined operations the completer has already tried at least once (see `idem intents`)',
    read: (s) => s.intents.retrying,
  },
];
