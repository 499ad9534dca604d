/* The consumers' inbox: per-consumer counts and the dead messages with their errors. */
import { apiView } from '../api.js';
import { errorText, mono, monoOr, when } from '../format.js';
import { countColumn, counted, filterColumn, listSection, messageDetails } from '../widgets.js';
import { intentLink } from './trace.js';

const consumers = {
  title: 'Inbox consumers',
  columns: [
    filterColumn('Consumer', 'inbox', 'consumer'),
    countColumn('Processed', 'processed'),
    countColumn('Duplicates', 'duplicates'),
    countColumn('Dead', 'dead', 'danger'),
  ],
  table: { empty: 'No messages recorded yet.', emptyKind: 'neutral' },
  note: 'Processed message ids per consumer; duplicates were acknowledged without running the handler.',
};

const deadMessages = {
  title: counted('inbox-dead', 'Dead messages', 'dead'),
  columns: [
    { title: 'Consumer', cell: (m) => mono(m.consumer) },
    { title: 'Message id', cell: (m) => mono(m.messageId, 'key') },
    { title: 'Attempts', class: 'num', cell: (m) => String(m.attempts) },
    { title: 'Last error', cell: (m) => errorText(m.lastError) },
    { title: 'Origin', cell: (m) => monoOr(m.origin) },
    { title: 'Dead since', cell: (m) => when(m.processedAt) },
    { title: 'Message', cell: (m) => messageDetails(m.payload, 'payload', m.headers) },
    { title: 'Intent', cell: (m) => intentLink(m.intent) },
  ],
  table: { rowClass: () => 'row-dead', empty: 'No dead messages.' },
  note: 'Messages a consumer gave up on. A redelivery of the same id (from the broker’s dead-letter queue) runs the handler again.',
};

export const renderInbox = apiView('inbox', (data) => [
  listSection(consumers, data.consumers),
  listSection(deadMessages, data.dead),
]);
