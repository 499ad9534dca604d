/* An intent's timeline (api/trace, docs/trace.md) in causal order, and the search that finds one:
 * by the intent's names (tenant, operation, key), a message id, a derived key or a webhook
 * delivery id. Every view's rows that belong to an intent link here (`intentLink`); webhook rows,
 * whose intent only the trace knows, link by their delivery (`deliveryLink`). */
import { api } from '../api.js';
import { h, link, routeHref } from '../dom.js';
import { filterForm } from '../filters.js';
import { badge, errorText, mono, monoOr, muted, when } from '../format.js';
import { facts, section, table } from '../widgets.js';

/** A link to the timeline of `intent` ({ tenant, operation, key }), or a dash when there is none. */
export function intentLink(intent, label) {
  if (!intent) return muted('—');
  return h(
    'a',
    {
      href: routeHref('trace', { tenant: intent.tenant, operation: intent.operation, key: intent.key }),
      class: 'intent-link',
      title: `${intent.tenant} / ${intent.operation} / ${intent.key}`,
    },
    label || 'timeline',
  );
}

/**
 * A link to the timeline of the intent a webhook delivery names: a received one (`source` given,
 * with its `tenant`) or a sent one (its message id). The trace answers which intent that is.
 */
export function deliveryLink({ deliveryId, source, tenant }) {
  return h(
    'a',
    {
      href: routeHref('trace', { delivery: deliveryId, source, tenant }),
      class: 'delivery-link',
      title: source ? `received from ${source}` : 'sent by this service',
    },
    'timeline',
  );
}

const searchFields = [
  { name: 'tenant', label: 'Tenant', placeholder: 'exact tenant id' },
  { name: 'operation', label: 'Operation', placeholder: 'exact operation' },
  { name: 'key', label: 'Key', placeholder: 'idempotency key' },
  { name: 'message', label: 'Message id', placeholder: 'outbox event or inbox message id' },
  { name: 'derivedKey', label: 'Derived key', placeholder: 'key a step or call sent' },
  { name: 'delivery', label: 'Delivery id', placeholder: 'webhook delivery or message id' },
  { name: 'source', label: 'Source', placeholder: 'webhook source (for a received delivery)' },
];

/** A receipt's relation to the traced intent, in words. */
const relations = {
  caused: 'started this intent',
  'acted-for': 'acted for this intent',
  sent: 'sent by this intent',
};

const pair = (a, b) => [mono(a), ' ', muted('·'), ' ', mono(b)];

/** What each kind of item says beside its kind and time. */
const describe = {
  request: (i) => [badge(i.state), ' fence ', String(i.fence), i.error ? [' ', errorText(i.error)] : null],
  step: (i) => [
    mono(i.name),
    ' ',
    badge(i.stepKind, 'neutral'),
    i.derivedKey ? [' key ', mono(i.derivedKey, 'key')] : null,
    ' ',
    i.recorded ? badge('recorded', 'completed') : badge('not recorded', 'stuck'),
  ],
  outbox: (i) => [
    pair(i.topic, i.type),
    ' ',
    mono(i.id),
    ' ',
    i.deadAt ? badge('dead') : i.publishedAt ? badge('published', 'completed') : badge('pending'),
    i.lastError ? [' ', errorText(i.lastError)] : null,
  ],
  consumption: (i) => [
    pair(i.consumer, i.messageId),
    ' ',
    badge(i.state),
    i.lastError ? [' ', errorText(i.lastError)] : null,
  ],
  task: (i) => [
    pair(i.queue, i.key),
    ' #',
    i.id,
    ' ',
    badge(i.state),
    i.lastError ? [' ', errorText(i.lastError)] : null,
  ],
  saga: (i) => [pair(i.saga, i.key), ' ', badge(i.status)],
  'saga-step': (i) => [
    String(i.position),
    ' ',
    mono(i.name),
    ' ',
    badge(i.state),
    ' key ',
    mono(i.actionKey, 'key'),
  ],
  'caused-intent': (i) => [
    pair(i.intent.operation, i.intent.key),
    ' ',
    badge(i.state),
    ' ',
    intentLink(i.intent, 'its timeline'),
  ],
  'webhook-sent': (i) => [
    mono(i.type),
    ' → ',
    mono(i.endpointId),
    ' ',
    mono(i.messageId, 'key'),
    ' ',
    badge(i.state),
    ` ${i.attempts} attempt${i.attempts === 1 ? '' : 's'}`,
    i.lastStatus === null ? null : [' HTTP ', String(i.lastStatus)],
    i.lastError ? [' ', errorText(i.lastError)] : null,
  ],
  'webhook-attempt': (i) => [
    mono(i.endpointId),
    ` #${i.attempt} `,
    badge(i.outcome, { retry: 'pending', gone: 'dead' }[i.outcome]),
    i.status === null ? ' no answer' : [' HTTP ', String(i.status)],
    ` ${i.latencyMs} ms`,
    i.error ? [' ', errorText(i.error)] : null,
  ],
  'webhook-received': (i) => [
    pair(i.source, i.deliveryId),
    i.type ? [' ', mono(i.type)] : null,
    ' ',
    badge(i.state),
    ' ',
    h('span', { class: 'relation' }, relations[i.relation] || i.relation),
    i.lastError ? [' ', errorText(i.lastError)] : null,
  ],
};

const timelineColumns = [
  { title: 'Kind', cell: (i) => badge(i.kind, 'neutral') },
  { title: 'Time', cell: (i) => when(i.at) },
  {
    title: 'Details',
    cell: (i) => h('span', { class: 'item-details' }, (describe[i.kind] || (() => ''))(i)),
  },
  { title: 'Trace context', cell: (i) => monoOr(i.traceparent) },
];

function lookupText(lookup) {
  if (lookup.by === 'intent') return 'by its names';
  if (lookup.by === 'delivery') {
    const how = lookup.source ? `received from ${lookup.source}` : 'sent';
    // A delivery may name several intents (the ones its handler started, the sender's): the
    // first is shown; the others are listed so the operator can trace them too.
    const others =
      lookup.intents && lookup.intents.length > 1 ? `; it names ${lookup.intents.join(', ')}` : '';
    return `by delivery id ${lookup.value} (${how})${others}`;
  }
  return `by ${lookup.by === 'message' ? 'message id' : lookup.by} ${lookup.value}`;
}

export async function renderTrace(params) {
  const search = section(
    'Trace an intent',
    'Everything recorded on behalf of one intent, in causal order. Give the tenant, operation and key; or a message id (with its tenant, a primary-key read); or a derived key; or a webhook delivery id (with its source when it was received here).',
    filterForm(searchFields, params, 'trace'),
  );
  if (!Object.values(params).some(Boolean)) return [search];
  let timeline;
  try {
    timeline = await api('trace', params);
  } catch (error) {
    return [search, h('p', { class: 'callout callout-danger', id: 'trace-missing' }, error.message)];
  }
  const { intent, lookup, items } = timeline;
  return [
    search,
    section(
      h('span', { id: 'timeline' }, `${intent.tenant} / ${intent.operation} / ${intent.key}`),
      `Found ${lookupText(lookup)}. ${items.length} record${items.length === 1 ? '' : 's'}.`,
      facts([
        ['intent', mono(intent.ref)],
        [
          'request',
          link(
            'request',
            { tenant: intent.tenant, operation: intent.operation, key: intent.key },
            'open the request',
          ),
        ],
      ]),
      table(timelineColumns, items, { rowClass: (i) => `timeline-${i.kind}` }),
    ),
  ];
}
