import { createTrace } from '../../trace/trace.js';
import type { Timeline, TimelineItem, WebhookReceivedItem } from '../../trace/types.js';
import { parseCommand, usageError } from '../args.js';
import { checkMigrated, openDatabase } from '../database.js';

const usage = `usage: idem trace <tenant> <operation> <key> [--json] [--schema idem]
       idem trace --message <id> [--tenant T] [--json]
       idem trace --derived-key <key> [--json]
       idem trace --delivery <id> [--source S] [--tenant T] [--json]

Prints one intent's timeline in causal order: the request (claimed, recorded), each step and call
(derived key, start, end), each outbox event (written, published when and where, attempts,
dead-lettered), each consumer's inbox record (in any process), tasks (claims, completion), sagas
and their steps, the intents it caused, and its webhooks (sent, each attempt's answer, received).
Exit code 1 when no record names the intent.

  --message ID       the intent that caused a message (an outbox event id, an inbox message id)
  --tenant T         with --message or --delivery: the tenant of its rows (a primary-key lookup;
                     without it every tenant's rows are searched)
  --derived-key K    the intent whose step, call or saga step sent the key K downstream
  --delivery ID      with --source: the first intent a received webhook's handler started (else
                     its idem sender's intent); without: the intent that sent the webhook ID
  --source S         with --delivery: the receiver's source the delivery came from
  --json             the timeline as JSON (docs/trace.md): {"version":1,"intent":{tenant,
                     operation,key,ref},"lookup":{by,value?},"items":[{kind,at,...}]}, kinds
                     request, step, outbox, consumption, task, saga, saga-step, caused-intent,
                     webhook-sent, webhook-attempt, webhook-received
  --schema NAME      schema of idem's tables (default idem)`;

/** `idem trace`: an intent's timeline, by its names or by a reverse lookup. */
export async function run(argv: string[]): Promise<number> {
  const args = parseCommand(
    'trace',
    usage,
    argv,
    {
      schema: { type: 'string', default: 'idem' },
      json: { type: 'boolean', default: false },
      message: { type: 'string' },
      tenant: { type: 'string' },
      'derived-key': { type: 'string' },
      delivery: { type: 'string' },
      source: { type: 'string' },
    },
    3,
  );
  if (args.exitCode !== undefined) return args.exitCode;
  const { schema, json, message, tenant, delivery, source } = args.values;
  const derivedKey = args.values['derived-key'];
  const lookups = [message, derivedKey, delivery].filter((v) => v !== undefined).length;
  if (lookups > 1 || (lookups === 1 && args.positionals.length > 0)) {
    return usageError(
      'trace',
      'give one of <tenant> <operation> <key>, --message, --derived-key, --delivery',
    );
  }
  if (source !== undefined && delivery === undefined)
    return usageError('trace', '--source goes with --delivery');
  if (lookups === 0 && args.positionals.length < 3) {
    const missing = ['<tenant>', '<operation>', '<key>'].slice(args.positionals.length).join(' ');
    return usageError('trace', `missing ${missing}`);
  }
  if (tenant !== undefined && message === undefined && delivery === undefined)
    return usageError('trace', '--tenant goes with --message or --delivery');
  const db = await openDatabase();
  try {
    await checkMigrated(db, schema);
    const trace = createTrace({ sql: db.sql, schema });
    const [t, operation, key] = args.positionals as [string, string, string];
    const timeline =
      message !== undefined
        ? await trace.message(message, tenant === undefined ? {} : { tenant })
        : derivedKey !== undefined
          ? await trace.derivedKey(derivedKey)
          : delivery !== undefined
            ? await trace.delivery(delivery, {
                ...(source === undefined ? {} : { source }),
                ...(tenant === undefined ? {} : { tenant }),
              })
            : await trace.intent({ tenant: t, operation, key });
    if (!timeline) {
      console.log(json ? 'null' : 'no record names this intent');
      return 1;
    }
    console.log(json ? JSON.stringify(timeline, null, 2) : renderTimeline(timeline));
    return 0;
  } finally {
    await db.close();
  }
}

/** The human form: a header, then one line per item, time first. */
export function renderTimeline(timeline: Timeline): string {
  const { intent, lookup } = timeline;
  const header = [
    `intent ${intent.ref}  (tenant '${intent.tenant}', operation '${intent.operation}', key '${intent.key}')`,
    ...(lookup.by === 'intent' ? [] : [`found by ${lookup.by} ${lookup.value}`]),
    ...(lookup.by === 'delivery' && (lookup.intents?.length ?? 0) > 1
      ? [`the delivery also names ${lookup.intents!.slice(1).join(', ')}`]
      : []),
  ];
  const lines = timeline.items.map((item) => `${(item.at ?? '-').padEnd(24)}  ${describe(item)}`);
  return [...header, '', ...lines].join('\n');
}

const trace = (traceparent: string | null) => (traceparent ? `  trace ${traceparent.slice(3, 35)}` : '');
const when = (label: string, at: string | null) => (at ? `  ${label} ${at}` : '');
const receivedRelation: Record<WebhookReceivedItem['relation'], string> = {
  caused: '  started this intent',
  'acted-for': '  acted for this intent',
  sent: '  sent by this intent',
};

function describe(item: TimelineItem): string {
  switch (item.kind) {
    case 'request':
      return `request      ${item.state}${when('recorded', item.completedAt)}  fence ${item.fence}${
        item.recoveryPoint ? `  at ${item.recoveryPoint}` : ''
      }${item.error ? `  error ${item.error}` : ''}${item.causedBy ? `  caused by ${item.causedBy}` : ''}${trace(item.traceparent)}`;
    case 'step':
      return `${item.stepKind.padEnd(5)} ${item.name.padEnd(6)} ${item.derivedKey ?? '(no derived key)'}${when(
        'completed',
        item.completedAt,
      )}${item.recorded ? '' : '  started, not recorded'}${item.fence > 1 ? `  fence ${item.fence}` : ''}${trace(item.traceparent)}`;
    case 'outbox':
      return `outbox       ${item.type} → ${item.topic} (key ${item.orderingKey}) id ${item.id}${
        item.publishedAt ? `  published ${item.publishedAt}` : item.deadAt ? '' : '  pending'
      }  attempts ${item.attempts}${item.deadAt ? `  DEAD ${item.deadAt}: ${item.lastError ?? ''}` : ''}${trace(item.traceparent)}`;
    case 'consumption':
      return `consumed     by ${item.consumer}  ${item.state}  message ${item.messageId}${
        item.duplicates > 0 ? `  duplicates ${item.duplicates}` : ''
      }${trace(item.traceparent)}`;
    case 'task':
      return `task         ${item.queue}/${item.key} #${item.id}  ${item.state}  attempts ${item.attempts}/${item.maxAttempts}${when(
        'finished',
        item.finishedAt,
      )}${trace(item.traceparent)}`;
    case 'saga':
      return `saga         ${item.saga}/${item.key}  ${item.status}${when('finished', item.finishedAt)}${trace(item.traceparent)}`;
    case 'saga-step':
      return `saga step    ${item.saga} #${item.position} ${item.name}  ${item.state}  action ${item.actionKey}${when(
        'done',
        item.doneAt,
      )}${when('compensated', item.compensatedAt)}`;
    case 'caused-intent':
      return `caused       ${item.intent.ref}  ${item.state}${trace(item.traceparent)}`;
    case 'webhook-sent':
      return `webhook      ${item.type} → ${item.endpointId} id ${item.messageId}  ${item.state}  attempts ${item.attempts}${
        item.lastStatus === null ? '' : `  last ${item.lastStatus}`
      }${when('delivered', item.deliveredAt)}${trace(item.traceparent)}`;
    case 'webhook-attempt':
      return `  attempt #${item.attempt} → ${item.endpointId} id ${item.messageId}  ${item.outcome}${
        item.status === null ? '' : `  ${item.status}`
      }  ${item.latencyMs} ms${item.error ? `  ${item.error}` : ''}`;
    case 'webhook-received':
      return `received     ${item.source} ${item.deliveryId}${item.type ? ` (${item.type})` : ''}  ${item.state}${
        receivedRelation[item.relation]
      }${trace(item.traceparent)}`;
  }
}
