/** The counts a soak prints at the end, and the JSON summary it writes beside its logs. */
import type { ChaosStats } from './chaos.js';
import type { ClientStats, Intent } from './clients.js';
import type { SoakOptions } from './options.js';
import type { Backlog } from './settle.js';
import type { SoakState } from './state.js';
import type { Finding } from './verify.js';

export interface SoakSummary {
  runId: string;
  seed: number;
  transport: string;
  instances: number;
  clients: number;
  durationS: number;
  wallS: number;
  settleS: number;
  intents: number;
  succeeded: number;
  declined: number;
  refunds: number;
  refundWaitsTimedOut: number;
  requests: number;
  retries: number;
  timeouts: number;
  networkErrors: number;
  answers: Record<string, number>;
  maxAttemptsPerIntent: number;
  kills: number;
  restarts: number;
  failedRestarts: number;
  brokerRestarts: number;
  killsMidRequest: number;
  killsMidStep: number;
  killsMidDispatch: number;
  killsMidConsume: number;
  killsMidWebhook: number;
  killsMidClaim: number;
  events: number;
  ledgerEntries: number;
  webhookReceipts: Record<string, number>;
  backlogAtVerdict: Backlog;
  duplicates: number;
  losses: number;
}

export function summarise(input: {
  runId: string;
  options: SoakOptions;
  intents: readonly Intent[];
  clients: ClientStats;
  chaos: ChaosStats;
  state: SoakState;
  backlog: Backlog;
  findings: readonly Finding[];
  wallMs: number;
  settleMs: number;
}): SoakSummary {
  const { intents, clients, chaos, state, findings, options } = input;
  return {
    runId: input.runId,
    seed: options.seed,
    transport: options.transport,
    instances: options.instances,
    clients: options.clients,
    durationS: Math.round(options.durationMs / 1000),
    wallS: Math.round(input.wallMs / 1000),
    settleS: Math.round(input.settleMs / 100) / 10,
    intents: intents.length,
    succeeded: intents.filter((i) => i.finalStatus === 201).length,
    declined: intents.filter((i) => i.finalStatus === 402).length,
    refunds: intents.reduce((n, i) => n + i.refunds.length, 0),
    refundWaitsTimedOut: clients.refundWaitsTimedOut,
    requests: clients.requests,
    retries: clients.retries,
    timeouts: clients.timeouts,
    networkErrors: clients.networkErrors,
    answers: Object.fromEntries([...clients.byStatus].sort()),
    maxAttemptsPerIntent: Math.max(0, ...intents.map((i) => i.attempts)),
    kills: chaos.kills,
    restarts: chaos.restarts,
    failedRestarts: chaos.failedRestarts,
    brokerRestarts: chaos.brokerRestarts,
    killsMidRequest: chaos.midRequest,
    killsMidStep: chaos.midStep,
    killsMidDispatch: chaos.midDispatch,
    killsMidConsume: chaos.midConsume,
    killsMidWebhook: chaos.midWebhook,
    killsMidClaim: chaos.midClaim,
    events: state.outbox.length,
    ledgerEntries: state.ledger.length,
    webhookReceipts: Object.fromEntries(state.receipts),
    backlogAtVerdict: input.backlog,
    duplicates: findings.filter((f) => f.kind === 'duplicate').length,
    losses: findings.filter((f) => f.kind === 'loss').length,
  };
}

export function printSummary(summary: SoakSummary, findings: readonly Finding[]): void {
  const rows: [string, string | number][] = [
    ['transport / instances / clients', `${summary.transport} / ${summary.instances} / ${summary.clients}`],
    [
      'duration (chaos) / wall clock',
      `${summary.durationS} s / ${summary.wallS} s (settled in ${summary.settleS} s)`,
    ],
    [
      'payments (intents)',
      `${summary.intents} (${summary.succeeded} succeeded, ${summary.declined} declined)`,
    ],
    [
      'refunds accepted by the provider',
      `${summary.refunds}${summary.refundWaitsTimedOut ? ` (${summary.refundWaitsTimedOut} second refunds sent before the first showed)` : ''}`,
    ],
    ['requests', summary.requests],
    [
      'retries (same key)',
      `${summary.retries} (max ${summary.maxAttemptsPerIntent} attempts for one payment)`,
    ],
    [
      'answers',
      Object.entries(summary.answers)
        .map(([k, v]) => `${k}:${v}`)
        .join(' '),
    ],
    ['timeouts / network errors', `${summary.timeouts} / ${summary.networkErrors}`],
    ['kills (kill -9)', summary.kills],
    [
      '  … with in flight',
      `requests ${summary.killsMidRequest}, steps ${summary.killsMidStep}, dispatch ${summary.killsMidDispatch}, consume ${summary.killsMidConsume}, webhooks ${summary.killsMidWebhook}, claims ${summary.killsMidClaim}`,
    ],
    [
      'restarts',
      `${summary.restarts}${summary.failedRestarts ? ` (and ${summary.failedRestarts} failed starts, tried again)` : ''}`,
    ],
    ['broker restarts', summary.brokerRestarts],
    ['events / ledger entries', `${summary.events} / ${summary.ledgerEntries}`],
    [
      'webhook receipts',
      Object.entries(summary.webhookReceipts)
        .map(([k, v]) => `${k}:${v}`)
        .join(' ') || '0',
    ],
    ['duplicates found', summary.duplicates],
    ['losses found', summary.losses],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  console.log(`\nsoak ${summary.runId} (seed ${summary.seed})`);
  for (const [k, v] of rows) console.log(`  ${k.padEnd(width)}  ${v}`);
  for (const kind of ['duplicate', 'loss'] as const) {
    const list = findings.filter((f) => f.kind === kind);
    if (list.length === 0) continue;
    console.log(`\n${kind === 'duplicate' ? 'DUPLICATES' : 'LOSSES'} (${list.length}):`);
    for (const f of list.slice(0, 30)) console.log(`  - ${f.what}`);
    if (list.length > 30) console.log(`  … and ${list.length - 30} more (see summary.json)`);
  }
}
