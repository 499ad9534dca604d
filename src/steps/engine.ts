/**
 * The step engine shared by multi-step operations (`idem.steps`, HTTP steps mode) and sagas
 * (`idem/workflow`): the only code that runs a step, so a fix to one is a fix to both.
 *
 * Two kinds of step (Brandur Leach's "atomic phases"; DBOS's transactions vs steps):
 * - a **local step** is one short transaction: fence check and lease renewal, the step's own
 *   writes, and its recorded result, committed together;
 * - a **call** reaches the outside world (a card provider, a broker, an e-mail service) and runs
 *   with no transaction, no row lock and no pooled connection held: a committed write (one
 *   statement where it can be) checks the fence, renews the lease and records that the call
 *   started; the call runs with its derived key while a background heartbeat keeps the lease;
 *   another committed write checks the fence again and records the result.
 *
 * Why no transaction across a call: measured here (bench/steps.bench.ts, quick mode, load 6), 40
 * operations each waiting 500 ms on a call inside their step's transaction, on a `pg` pool of 8,
 * took 2.6 s (the pool ran the calls 8 at a time), an unrelated `SELECT 1` on the same pool waited
 * 1.5–2.5 s, and 8 sessions sat `idle in transaction` throughout; as calls they took 0.55–0.6 s,
 * the `SELECT 1` waited 7–25 ms, and no session was idle in transaction.
 */
import type { Clock } from '../core/clock.js';
import { withIdempotencyKey } from '../core/key-context.js';
import { canCommitWith, type PipelinedTransaction, type Sql, type Transaction } from '../core/sql.js';
import { startHeartbeat } from './heartbeat.js';
import type { FencedLease } from './lease.js';
import { encodeResult } from './result-codec.js';

/** What the engine runs steps with. */
export interface StepRunner<Client> {
  sql: Sql<Client>;
  clock: Clock;
  /** How often a running call renews its lease, in ms of `clock` time. */
  heartbeatMs: number;
}

/** What a call to the outside world gets. There is no transaction: it must not touch the database. */
export interface CallContext {
  /** The step's derived idempotency key: send it downstream. The same on every retry and takeover. */
  key: string;
  /**
   * Aborted when this execution lost its lease while the call ran (its heartbeat found that a
   * retry took the operation over). Pass it to `fetch` or your client; the result of an aborted
   * call is refused either way (`FencedError`), and the new holder repeats the call with the
   * same key.
   */
  signal: AbortSignal;
}

/** A local step: one short transaction. */
export interface LocalStep<R, Client> {
  /** The step's name: the recovery point stored with the result, and the name its errors give. */
  point: string;
  /** The step's derived key, made current for the outgoing client while `run` runs. */
  key: string;
  run(tx: Transaction<Client>): Promise<R>;
  /**
   * Records the result in the same transaction: its plain-JSON text and its type annotations
   * (null for plain JSON; see result-codec.ts).
   */
  record(tx: Transaction<Client>, json: string, meta: string | null): Promise<void>;
  /**
   * `record` as one statement sent together with COMMIT (`queryAndCommit` in core/sql.ts), used
   * instead of `record` when the adapter can (a node-postgres pool in pipeline mode, postgres.js):
   * one round trip for both. The transaction is over afterwards. Whenever the step's writes must
   * not commit, the statement must raise rather than touch 0 rows: COMMIT then answers with a
   * rollback.
   */
  recordWithCommit?(tx: PipelinedTransaction<Client>, json: string, meta: string | null): Promise<void>;
}

/**
 * A call to the outside world, with a committed write before it and one after it, and no
 * transaction open while it runs.
 */
export interface CallStep<R, Client> {
  /** The step's name, for the error when its result cannot be stored. */
  name: string;
  key: string;
  /**
   * Before the call, committed: checks the fence, renews the lease and records that the call
   * started (from then on an external effect may exist). Resolves false when the fence was
   * raised. Default: `lease.renew()`. One statement on its own where it can be: it runs while
   * every call of a burst starts at once.
   */
  begin?(sql: Sql<Client>): Promise<boolean>;
  call(context: CallContext): Promise<R>;
  /**
   * After the call, committed: checks the fence and records the result (with any local writes
   * that go with it, see `inHeldTransaction`). Throws `FencedError` when the fence was raised.
   */
  record(sql: Sql<Client>, value: R, json: string, meta: string | null): Promise<void>;
}

/**
 * A step's value and how it was recorded: the plain-JSON text and the type annotations (null for
 * plain JSON), which `decodeResult` turns back into a value equal to `value`, with the same types.
 */
export interface StepResult<R> {
  value: R;
  json: string;
  meta: string | null;
}

/**
 * Runs a local step: fence, the step's writes and its result commit together. Where the adapter
 * can, the result goes out with COMMIT (`recordWithCommit`): on a pipelined pool a step is then
 * three round trips (BEGIN with the fence check, the step's statement, the record with COMMIT)
 * instead of four.
 */
export function runLocalStep<R, Client>(
  runner: StepRunner<Client>,
  lease: FencedLease,
  step: LocalStep<R, Client>,
): Promise<StepResult<R>> {
  return runner.sql.transaction(async (tx) => {
    await lease.hold(tx, step.point);
    // Outgoing calls made inside (`idem/client`) carry the step's key without being told.
    const value = await withIdempotencyKey(step.key, () => step.run(tx));
    // A value that would not resume as itself throws here: the transaction rolls back, nothing is stored.
    const { json, meta } = encodeResult(value, `step "${step.point}"`);
    if (step.recordWithCommit && canCommitWith(tx)) await step.recordWithCommit(tx, json, meta);
    else await step.record(tx, json, meta);
    return { value, json, meta };
  });
}

/**
 * Runs a call with no transaction held while it runs. Throws `FencedError` when the lease was
 * lost before or during the call (the call's own error, if any, is then moot: the new holder
 * repeats it).
 */
export async function runCallStep<R, Client>(
  runner: StepRunner<Client>,
  lease: FencedLease,
  step: CallStep<R, Client>,
): Promise<StepResult<R>> {
  const held = step.begin ? await step.begin(runner.sql) : await lease.renew();
  if (!held) throw lease.lost();
  const lost = new AbortController();
  const heartbeat = startHeartbeat(lease, runner.clock, runner.heartbeatMs, () => lost.abort(lease.lost()));
  let value: R;
  try {
    value = await withIdempotencyKey(step.key, () => step.call({ key: step.key, signal: lost.signal }));
  } catch (error) {
    if (lost.signal.aborted) throw lease.lost();
    throw error;
  } finally {
    await heartbeat.stop();
  }
  if (lost.signal.aborted) throw lease.lost();
  const { json, meta } = encodeResult(value, `call "${step.name}"`);
  await step.record(runner.sql, value, json, meta);
  return { value, json, meta };
}

/**
 * A short transaction that first holds the lease (fence check, renewal, row lock, recovery
 * point), then runs `fn`: for a call's record that carries local writes.
 */
export function inHeldTransaction<T, Client>(
  runner: StepRunner<Client>,
  lease: FencedLease,
  point: string,
  fn: (tx: Transaction<Client>) => Promise<T>,
): Promise<T> {
  return runner.sql.transaction(async (tx) => {
    await lease.hold(tx, point);
    return fn(tx);
  });
}

export { defaultHeartbeatMs } from './lease.js';

/** An error as operators read it (stored, bounded). */
export function describeFailure(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  // A NUL cannot be stored in a text column (22021): the failure being stored may well be that one.
  return text.replaceAll('\u0000', '\\u0000').slice(0, 2000);
}
