/**
 * Two (or more) polling agents under chaos: tasks are enqueued, agents run as separate processes,
 * and a chaos loop SIGKILLs them (then starts a replacement) or freezes them with SIGSTOP for
 * longer than their lease (then thaws them: a zombie that resumes mid-task) at random moments.
 * The outbox dispatcher delivers the notifications to a consumer that records what it "sent".
 * At the end every task must have exactly one outbox event and exactly one sent notification.
 *
 * Run it: DATABASE_URL=postgres://… npx tsx examples/polling-agent/demo.ts
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { fromPg } from '../../src/adapters/pg.js';
import { createClaims } from '../../src/claims/index.js';
import { createInbox } from '../../src/inbox/index.js';
import { migrate } from '../../src/migrate/migrate.js';
import { createOutboxDispatcher, createInDatabasePublisher } from '../../src/outbox/index.js';
import { agentQueue, notificationsTopic, type AgentTask } from './shared.js';

const agentScript = fileURLToPath(new URL('./agent.ts', import.meta.url));

export interface DemoOptions {
  databaseUrl: string;
  /** Schema for idem's tables and the demo's `notifications_sent`; migrated here. */
  schema: string;
  /** Default 60. */
  tasks?: number;
  /** Agents running at once. Default 2. */
  agents?: number;
  /** The agents' lease. Default 800 ms: short, so takeovers happen during the demo. */
  leaseMs?: number;
  /** Upper bound of an agent's thinking time per task. Default 300 ms. */
  thinkMs?: number;
  /** Chaos strikes every [min, max] ms. Default [300, 900]. */
  chaosEveryMs?: [number, number];
  /** Gives up after this long. Default 120000 ms. */
  timeoutMs?: number;
  log?: (line: string) => void;
}

export interface DemoResult {
  tasks: number;
  completed: number;
  /** Outbox events per task key (every value must be 1). */
  events: Map<string, number>;
  /** Notifications the consumer sent per task key (every value must be 1). */
  sent: Map<string, number>;
  kills: number;
  freezes: number;
  agentStarts: number;
  /** Completions refused to agents whose lease had been taken over (zombies). */
  fencedRefusals: number;
  seconds: number;
}

export async function runDemo(options: DemoOptions): Promise<DemoResult> {
  const total = options.tasks ?? 60;
  const agentCount = options.agents ?? 2;
  const leaseMs = options.leaseMs ?? 800;
  const [chaosMin, chaosMax] = options.chaosEveryMs ?? [300, 900];
  const timeoutMs = options.timeoutMs ?? 120_000;
  const log = options.log ?? (() => undefined);
  const { schema } = options;
  const started = Date.now();

  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 6 });
  const sql = fromPg(pool);
  await migrate(sql, { schema });
  await pool.query(
    `CREATE TABLE IF NOT EXISTS "${schema}".notifications_sent (
       event_id text PRIMARY KEY, task text NOT NULL, sent_at timestamptz NOT NULL DEFAULT now())`,
  );
  const claims = createClaims({ sql, schema });
  const run = randomBytes(3).toString('hex');
  await claims.enqueueMany<AgentTask>(
    Array.from({ length: total }, (_, i) => ({
      tenant: 'demo',
      queue: agentQueue,
      key: `notify-${run}-${i}`,
      payload: { user: `user-${i % 7}`, text: `your report ${i} is ready` },
    })),
  );

  // The notification service: the outbox dispatcher delivers to a consumer behind an inbox, which
  // dedupes on the event id, so a redelivered event is not sent twice.
  const inbox = createInbox({ sql, schema });
  const dispatcher = createOutboxDispatcher({
    sql,
    schema,
    topics: [notificationsTopic],
    pollIntervalMs: 50,
    publisher: createInDatabasePublisher({
      inbox,
      subscribers: [
        {
          consumer: 'notifier',
          topics: [notificationsTopic],
          handler: async (tx, event) => {
            const payload = event.payload as { task: string };
            await tx.query(`INSERT INTO "${schema}".notifications_sent (event_id, task) VALUES ($1, $2)`, [
              event.id,
              payload.task,
            ]);
          },
        },
      ],
    }),
  });
  await dispatcher.start();

  let kills = 0;
  let freezes = 0;
  let agentStarts = 0;
  let fencedRefusals = 0;
  const agents: { proc: ChildProcess; frozen: boolean; ready: boolean; thinking: boolean }[] = [];
  const startAgent = (slot: number) => {
    agentStarts++;
    const proc = spawn(process.execPath, ['--import', 'tsx', agentScript], {
      env: {
        ...process.env,
        DATABASE_URL: options.databaseUrl,
        IDEM_SCHEMA: schema,
        AGENT_ID: `agent-${slot}-${agentStarts}`,
        LEASE_MS: String(leaseMs),
        THINK_MS: String(options.thinkMs ?? 300),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const agent = { proc, frozen: false, ready: false, thinking: false };
    proc.stdout.on('data', (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n').filter(Boolean)) {
        if (line.endsWith(' ready')) agent.ready = true;
        agent.thinking = line.includes(' thinking ');
        if (line.includes(' fenced ')) fencedRefusals++;
        log(line);
      }
    });
    proc.stderr.on('data', (chunk: Buffer) => log(`agent ${slot} stderr: ${chunk.toString().trim()}`));
    agents[slot] = agent;
  };
  const completed = async () => {
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".tasks WHERE queue = $1 AND state = 'completed' AND dedupe_key LIKE $2`,
      [agentQueue, `notify-${run}-%`],
    );
    return rows[0]!.n;
  };
  const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

  let done: number | undefined;
  try {
    for (let slot = 0; slot < agentCount; slot++) startAgent(slot);

    // Chaos, until every task is completed.
    await pause(chaosMin + Math.random() * (chaosMax - chaosMin));
    while ((done = await completed()) < total) {
      if (Date.now() - started > timeoutMs) break;
      // Every third strike, starting with the second, is a freeze, landed while the agent is thinking
      // about a task it holds, so it wakes as a zombie; the others are kills. Strikes land on agents
      // at work: killing one that is still starting up proves nothing. While one is frozen the others
      // are left alone, so someone is there to take its tasks over. Which agent is random; when no
      // agent fits, look again shortly rather than waiting a whole chaos interval, so that a busy
      // machine (slow agent restarts) still sees its freeze before the tasks run out.
      const freezeTurn = (kills + freezes) % 3 === 1;
      const targets = agents
        .map((agent, slot) => ({ agent, slot }))
        .filter(({ agent }) => agent.ready && (!freezeTurn || agent.thinking));
      if (agents.some((a) => a.frozen) || targets.length === 0) {
        await pause(20);
        continue;
      }
      const { agent, slot } = targets[Math.floor(Math.random() * targets.length)]!;
      if (!freezeTurn) {
        agent.proc.kill('SIGKILL');
        kills++;
        log(`chaos: SIGKILL agent ${slot}`);
        startAgent(slot);
      } else {
        // Frozen past its lease: another agent takes its task over; when it thaws it is a zombie.
        agent.proc.kill('SIGSTOP');
        agent.frozen = true;
        freezes++;
        const frozenFor = leaseMs * (3 + 2 * Math.random());
        log(`chaos: SIGSTOP agent ${slot} for ${Math.round(frozenFor)} ms`);
        setTimeout(() => {
          agent.proc.kill('SIGCONT');
          agent.frozen = false;
        }, frozenFor);
      }
      await pause(chaosMin + Math.random() * (chaosMax - chaosMin));
    }
  } finally {
    // Let frozen agents thaw and finish their (fenced) attempts, then stop everyone.
    await pause(leaseMs * 3);
    for (const { proc } of agents) {
      proc.kill('SIGCONT');
      proc.kill('SIGTERM');
    }
    await Promise.all(
      agents.map(
        ({ proc }) =>
          new Promise<void>((resolve) => {
            if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
            const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
            proc.on('exit', () => {
              clearTimeout(timer);
              resolve();
            });
          }),
      ),
    );
    await dispatcher.stop();
    await dispatcher.drain();
  }

  const count = async (query: string) => {
    const { rows } = await pool.query<{ task: string; n: number }>(query, [`notify-${run}-%`]);
    return new Map(rows.map((r) => [r.task, r.n]));
  };
  const events = await count(
    `SELECT payload->>'task' AS task, count(*)::int AS n FROM "${schema}".outbox
     WHERE aggregatetype = '${notificationsTopic}' AND payload->>'task' LIKE $1 GROUP BY 1`,
  );
  const sent = await count(
    `SELECT task, count(*)::int AS n FROM "${schema}".notifications_sent WHERE task LIKE $1 GROUP BY 1`,
  );
  await pool.end();
  return {
    tasks: total,
    completed: done ?? 0,
    events,
    sent,
    kills,
    freezes,
    agentStarts,
    fencedRefusals,
    seconds: (Date.now() - started) / 1000,
  };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) throw new Error('set DATABASE_URL');
  const result = await runDemo({
    databaseUrl,
    schema: process.env.IDEM_SCHEMA ?? 'idem_polling_agent_demo',
    log: (line) => console.log(line),
  });
  const wrong = (counts: Map<string, number>) =>
    result.tasks - [...counts.values()].filter((n) => n === 1).length;
  console.log(
    `\n${result.completed}/${result.tasks} tasks completed in ${result.seconds.toFixed(1)} s; ` +
      `${result.kills} kills, ${result.freezes} freezes, ${result.fencedRefusals} zombie completions refused.\n` +
      `tasks without exactly one outbox event: ${wrong(result.events)}; ` +
      `without exactly one sent notification: ${wrong(result.sent)}`,
  );
  process.exitCode = wrong(result.events) === 0 && wrong(result.sent) === 0 ? 0 : 1;
}
