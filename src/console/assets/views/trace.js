/* An intent's timeline (api/trace, docs/trace.md) in causal order, and the search that finds one:
 * by the intent's names (tenant, operation, key), a message id or a derived key. Every view's rows
 * that belong to an intent link here (`intentLink`). */
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

const searchFields = [
  { name: 'tenant', label: 'Tenant', placeholder: 'exact tenant id' },
  { name: 'operation', label: 'Operation', placeholder: 'exact operation' },
  { name: 'key', label: 'Key', placeholder: 'idempotency key' },
  { name: 'message', label: 'Message id', placeholder: 'outbox event or inbox message id' },
  { name: 'derivedKey', label: 'Derived key', placeholder: 'key a step or call sent' },
];

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
  return `by ${lookup.by === 'message' ? 'message id' : lookup.by} ${lookup.value}`;
}

export async function renderTrace(params) {
  const search = section(
    'Trace an intent',
    'Everything recorded on behalf of one intent, in causal order. Give the tenant, operation and key; or a message id (with its tenant, a primary-key read); or a derived key.',
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
