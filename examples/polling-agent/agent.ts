/**
 * A background agent that polls for tasks, "thinks" about each one (the slow part: an LLM call,
 * a tool call), and sends a notification through the outbox. Run two or more of them: claims
 * with leases, heartbeats and fencing tokens make every task produce exactly one notification,
 * even when agents crash or stall mid-task.
 *
 * The shape that makes it safe:
 * 1. `claim` takes a batch with a lease (SKIP LOCKED: agents never wait for each other).
 * 2. `createKeepAlive` heartbeats while the agent thinks outside any transaction; if a heartbeat finds
 *    the lease taken over (this agent stalled too long), its signal aborts the work.
 * 3. One transaction completes the task (fenced: refused if another agent took it over) and adds
 *    the notification to the outbox. Both commit, or neither does. The outbox dispatcher then
 *    publishes it (at least once, with a stable event id that consumers dedupe on).
 *
 * env: DATABASE_URL, IDEM_SCHEMA (default idem), AGENT_ID, LEASE_MS (default 2000),
 *      THINK_MS (default 30: the upper bound of the simulated thinking time)
 */
import pg from 'pg';
import { v5 as uuidv5 } from 'uuid';
import { fromPg } from '../../src/adapters/pg.js';
import { createClaims, createKeepAlive, type ClaimedTask } from '../../src/claims/index.js';
import { isFenced } from '../../src/index.js';
import { createOutbox } from '../../src/outbox/index.js';
import { agentQueue, notificationNamespace, notificationsTopic, type AgentTask } from './shared.js';

async function main(): Promise<void> {
  const schema = process.env.IDEM_SCHEMA ?? 'idem';
  const agentId = process.env.AGENT_ID ?? `agent-${process.pid}`;
  const leaseMs = Number(process.env.LEASE_MS ?? 2000);
  const thinkMs = Number(process.env.THINK_MS ?? 30);
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 3 });
  const sql = fromPg(pool);
  const claims = createClaims({ sql, schema, leaseMs, workerId: agentId });
  const outbox = createOutbox({ schema });
  const log = (line: string) => process.stdout.write(`${agentId} ${line}\n`);

  let stopping = false;
  process.on('SIGTERM', () => (stopping = true));
  log('ready');
  while (!stopping) {
    const tasks = await claims.claim<AgentTask>(agentQueue, { limit: 3 });
    if (tasks.length === 0) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      continue;
    }
    for (const task of tasks) await handle(task);
  }
  await pool.end();

  async function handle(task: ClaimedTask<AgentTask>): Promise<void> {
    const alive = createKeepAlive({ claims, task, intervalMs: Math.floor(leaseMs / 4) });
    await alive.start();
    try {
      // The slow part, outside any transaction: nothing is held in the database meanwhile.
      log(`thinking ${task.key} fence=${task.fence}`);
      const text = await think(task.payload, thinkMs, alive.signal);
      await sql.transaction(async (tx) => {
        // Fence first: this refuses a zombie and row-locks the task until commit.
        await claims.completeIn(tx, task, { notified: true });
        await outbox.add(tx, {
          topic: notificationsTopic,
          key: task.payload.user,
          type: 'notification.requested',
          payload: { task: task.key, user: task.payload.user, text },
          id: uuidv5(task.downstreamKey, notificationNamespace),
        });
      });
      log(`completed ${task.key} fence=${task.fence}`);
    } catch (error) {
      if (isFenced(error) || alive.signal.aborted) {
        log(`fenced ${task.key} fence=${task.fence}: another agent took it over`);
        return;
      }
      try {
        const failed = await claims.fail(task, error);
        log(`failed ${task.key}: ${String(error)} -> ${failed.state}`);
      } catch (failError) {
        if (!isFenced(failError)) throw failError;
        log(`fenced ${task.key} fence=${task.fence}: another agent took it over`);
      }
    } finally {
      await alive.stop();
    }
  }
}

/** Stands in for an LLM or tool call: takes a while, can be cancelled. */
async function think(task: AgentTask, upToMs: number, signal: AbortSignal): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, Math.random() * upToMs);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(new Error('lease lost while thinking'));
      },
      { once: true },
    );
  });
  return `Hi ${task.user}: ${task.text}`;
}

await main();
