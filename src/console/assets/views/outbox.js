/* The outbox: backlog and lag per topic, dead letters with redrive, events being retried. */
/* global confirm */
import { apiView, post } from '../api.js';
import { h } from '../dom.js';
import { badge, count, duration, errorText, mono, when } from '../format.js';
import { reload } from '../router.js';
import { intentLink } from './trace.js';
import { countColumn, counted, filterColumn, flash, listSection, messageDetails, stat } from '../widgets.js';

async function redrive(filter, describe) {
  if (!confirm(`Redrive ${describe}? Dead events become due again with their attempts reset.`)) return;
  try {
    const result = await post('outbox/redrive', filter);
    await reload();
    flash(
      `Redriven ${describe}: ${result.revived} revived, ${result.released} released from behind them.`,
      'ok',
    );
  } catch (error) {
    flash(`Redrive failed: ${error.message}`, 'error');
  }
}

function eventColumns(extra, trailing) {
  return [
    { title: 'Event', cell: (e) => h('code', { class: 'mono', title: e.id }, `…${e.id.slice(-12)}`) },
    { title: 'Topic', cell: (e) => mono(e.topic) },
    { title: 'Key', cell: (e) => mono(e.key) },
    { title: 'Type', cell: (e) => mono(e.type) },
    { title: 'Attempts', class: 'num', cell: (e) => String(e.attempts) },
    { title: 'Last error', cell: (e) => errorText(e.lastError) },
    ...extra,
    { title: 'Payload', cell: (e) => messageDetails(e.payload, 'payload', e.headers) },
    { title: 'Intent', cell: (e) => intentLink(e.intent) },
    ...(trailing || []),
  ];
}

const topics = {
  title: 'Outbox',
  columns: [
    filterColumn('Topic', 'outbox', 'topic'),
    countColumn('Pending', 'pending'),
    countColumn('Dead', 'dead', 'danger'),
    { title: 'Lag', cell: (t) => duration(t.oldestPendingAgeMs) },
  ],
  table: { empty: 'No unpublished events.', emptyKind: 'ok' },
  note: 'Events written in business transactions, waiting for the dispatcher.',
};

/** Redrives one dead event. */
function redriveButton(e) {
  return h(
    'button',
    {
      class: 'btn btn-small',
      type: 'button',
      dataset: { redrive: e.id },
      onclick: () => redrive({ id: e.id }, `event …${e.id.slice(-12)}`),
    },
    'Redrive',
  );
}

const deadLetters = {
  title: counted('outbox-dead', 'Dead letters', 'dead'),
  columns: eventColumns(
    [{ title: 'Dead since', cell: (e) => when(e.deadAt) }],
    [{ title: '', cell: redriveButton }],
  ),
  table: { rowClass: () => 'row-dead', empty: 'No dead letters.' },
  note: 'Events the dispatcher gave up on. Later events of the same key wait behind them (parked). Redrive makes them due again.',
};

function nextAttempt(e) {
  if (!e.availableAt) return badge('parked', 'parked');
  return Date.parse(e.availableAt) <= Date.now() ? h('span', {}, 'due now') : when(e.availableAt);
}

const retrying = {
  title: 'Retrying',
  columns: eventColumns([{ title: 'Next attempt', cell: nextAttempt }]),
  table: { rowClass: () => 'row-warn', empty: 'No event is failing.' },
  note: 'Pending events with failed attempts; the dispatcher backs off between them.',
};

function stats(s) {
  return h(
    'div',
    { class: 'stats' },
    stat('pending', count(s.pending)),
    stat('due now', count(s.due)),
    stat('retrying', count(s.retrying), s.retrying > 0 ? 'warn' : ''),
    stat('parked behind dead', count(s.parked), s.parked > 0 ? 'warn' : ''),
    stat('dead', count(s.dead), s.dead > 0 ? 'danger' : 'good'),
    stat('lag (oldest pending)', duration(s.oldestPendingAgeMs), s.oldestPendingAgeMs > 60000 ? 'warn' : ''),
    stat('published, retained', count(s.published)),
  );
}

/** Redrives every dead event (of the filtered topic): shown when there are any. */
function redriveAll(topic) {
  return h(
    'div',
    { class: 'actions' },
    h(
      'button',
      {
        class: 'btn btn-danger',
        type: 'button',
        id: 'redrive-all',
        onclick: () =>
          redrive(
            topic ? { topic } : { all: true },
            topic ? `every dead event of ${topic}` : 'every dead event',
          ),
      },
      topic ? `Redrive all dead in ${topic}` : 'Redrive all dead events',
    ),
  );
}

export const renderOutbox = apiView('outbox', (data, params) => [
  listSection(topics, data.topics, stats(data.stats)),
  listSection(deadLetters, data.dead, data.dead.length > 0 ? redriveAll(params.topic) : null),
  listSection(retrying, data.retrying),
]);
