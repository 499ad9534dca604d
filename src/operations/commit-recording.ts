/**
 * Commit-time recording (`recording: 'commit'`, the default): the handler runs first, and the
 * key's completed record is inserted as the last statement of its transaction, so a first
 * execution costs one statement of idem's, and on a pipelined pool that statement goes out with
 * COMMIT. A concurrent duplicate may run its handler too: its record meets the first one's row
 * and its writes roll back, and it answers with the first one's result.
 */
import { canCommitWith, type Queryable, type Transaction } from '../core/sql.js';
import { SqlState, sqlStateOf } from '../core/sqlstate.js';
import type { OperationScope } from '../core/errors.js';
import {
  attempts,
  bounded,
  contextOf,
  isAnswer,
  replayBeforeTransaction,
  replayInFront,
  runAfresh,
  settle,
  waitInterval,
  type Handler,
  type KeyedEngine,
  type RecordingStrategy,
} from './keyed-run.js';
import { freshResult, toOutcome, type OperationResult, type Outcome } from './outcome.js';
import type { PreparedSpec } from './prepared-spec.js';
import type { RequestRow } from './request-row.js';
import { decide } from './resolve-existing.js';

/**
 * Thrown inside a commit-time recording transaction when the key already has a row that is not
 * ours to overwrite: it rolls this execution's writes back, and the caller then answers from the
 * row (a replay), waits for it (pending), or runs afresh (the row went away).
 */
class KeyTaken extends Error {
  /**
   * @param row the key's row, read in the transaction; null when it could not be.
   * @param unread the transaction ended with the record (pipelined with COMMIT): read the row anew.
   */
  constructor(
    readonly row: RequestRow | null,
    readonly unread = false,
  ) {
    super('the idempotency key was recorded by another execution');
  }
}

/** What the caller of `executeAndRecord` learns about a failed attempt. */
interface Execution {
  /** The handler threw (as opposed to idem's statements or COMMIT). */
  handlerFailed: boolean;
  /**
   * idem opened the transaction and may end it by sending the record with COMMIT, when the
   * adapter can (`queryAndCommit`). Never in `runIn`: that transaction is the caller's.
   */
  mayCommit?: boolean;
}

/** The savepoint `runIn` rolls back to when another execution recorded the key first. */
const recordSavepoint = 'idem_record';

export class CommitTimeRecording<Client> implements RecordingStrategy<Client> {
  constructor(private readonly engine: KeyedEngine<Client>) {}

  run<T>(prepared: PreparedSpec, handler: Handler<T, Client>): Promise<OperationResult<T>> {
    const deadline = this.engine.clock.now() + prepared.waitMs;
    // A replay answered by the read in front returns from here, with no async function around it
    // (each layer of promises costs a replay more than its SQL: see `observe`).
    return replayBeforeTransaction<T>(this.engine, prepared, deadline).then((front) =>
      isAnswer(front) ? front : this.runInTransaction(prepared, handler, front, deadline),
    );
  }

  /** `run` past the read in front: the handler's transaction, attempted until it settles. */
  private runInTransaction<T>(
    prepared: PreparedSpec,
    handler: Handler<T, Client>,
    front: 'row' | null,
    deadline: number,
  ): Promise<OperationResult<T>> {
    const { engine } = this;
    const { scope } = prepared;
    // The record may go out with COMMIT unless the key has a row to take over (its tombstone
    // passed): only a record that waits for its answer inside the transaction can do that. Known
    // from the read in front, or learnt from a pipelined record that found the row (one wasted,
    // rolled-back run of the handler in that rare case).
    let mayCommit = front !== 'row';
    let execution: Execution = { handlerFailed: false };
    return attempts(engine, prepared, {
      attempt: () => {
        execution = { handlerFailed: false, mayCommit };
        return engine.sql.transaction((tx) => this.executeAndRecord(tx, prepared, handler, execution));
      },
      recover: async (error) => {
        // Rolled back. Another execution recorded the key (found at commit), or may have (a
        // handler that failed on the first one's writes, say a unique business key): its
        // result answers. A failure at COMMIT is not read here: its outcome is unknown.
        const taken = error instanceof KeyTaken;
        if (!taken && !execution.handlerFailed) return undefined;
        const row = taken && !error.unread ? error.row : await this.readAfterFailure(engine.sql, scope);
        if (!row && !taken) return undefined;
        engine.replayRead.observe(scope.operation, true);
        const settled = await settle<T>(engine, engine.sql, prepared, row, deadline);
        if (settled) return settled;
        if (!taken) return undefined;
        mayCommit = false;
        return runAfresh; // the row went away or may be taken over
      },
    });
  }

  /** `runIn`: savepoint, handler, record; on a taken key, roll back to the savepoint. */
  async runIn<T, TxClient>(
    tx: Transaction<TxClient>,
    prepared: PreparedSpec,
    handler: Handler<T, TxClient>,
  ): Promise<OperationResult<T>> {
    const { engine } = this;
    const { scope } = prepared;
    const deadline = engine.clock.now() + prepared.waitMs;
    const front = await replayInFront<T>(engine, tx, prepared, deadline);
    if (isAnswer(front)) return front;
    for (;;) {
      await tx.query(`SAVEPOINT ${recordSavepoint}`);
      const execution: Execution = { handlerFailed: false };
      try {
        const result = await this.executeAndRecord(tx, prepared, handler, execution);
        engine.replayRead.observe(scope.operation, false);
        return result;
      } catch (error) {
        if (!(error instanceof KeyTaken || execution.handlerFailed)) throw error;
        // Undo this execution's writes (and leave an aborted statement behind), keep the caller's.
        try {
          await tx.query(`ROLLBACK TO SAVEPOINT ${recordSavepoint}`);
        } catch {
          throw error; // the connection is gone: the caller rolls back
        }
        const row = error instanceof KeyTaken ? error.row : await this.readAfterFailure(tx, scope);
        if (!row && !(error instanceof KeyTaken)) throw error;
        engine.replayRead.observe(scope.operation, true);
        const settled = await settle<T>(engine, tx, prepared, row, deadline);
        if (settled) return settled;
        if (!(error instanceof KeyTaken)) throw error;
        // The row went away (swept, or a multi-step execution freed it): run afresh.
      }
    }
  }

  /**
   * Runs the handler, then inserts the completed record as the last statement of its
   * transaction. When the key already has a row, a past tombstone is taken over in place;
   * another fingerprint, an expired result or a stored failure is thrown (rolling the handler's
   * writes back); anything else throws `KeyTaken`, which rolls them back too.
   */
  private async executeAndRecord<T, TxClient>(
    tx: Transaction<TxClient>,
    prepared: PreparedSpec,
    handler: Handler<T, TxClient>,
    execution: Execution,
  ): Promise<OperationResult<T>> {
    const { clock, statements } = this.engine;
    const { scope } = prepared;
    let outcome: Outcome<T>;
    try {
      outcome = toOutcome(await handler(tx, contextOf(scope)));
    } catch (error) {
      execution.handlerFailed = true;
      throw error;
    }
    const { fingerprint, retention, cause } = prepared;
    const record = { scope, fingerprint, retention, cause, outcome, now: clock.now() };
    if (execution.mayCommit && canCommitWith(tx)) {
      // The record goes out with COMMIT: one round trip for both (see `queryAndCommit`).
      try {
        await bounded(clock, prepared, () =>
          statements.recordOrFail.withCommit(tx, { ...record, wait: waitInterval(prepared, clock.now()) }),
        );
      } catch (error) {
        // The transaction rolled back; the row, committed by another execution, is read after it.
        if (sqlStateOf(error) === SqlState.uniqueViolation) throw new KeyTaken(null, true);
        throw error;
      }
      return freshResult(outcome);
    }
    const recorded = await bounded(clock, prepared, () =>
      statements.record(tx, { ...record, wait: waitInterval(prepared, clock.now()) }),
    );
    if (!recorded) {
      // The duplicate that got here first has committed (the insert waited for it), so a
      // statement from now on sees its row.
      const row = await statements.read(tx, { scope });
      if (!row) throw new KeyTaken(null);
      const decision = decide<T>(scope, row, prepared.fingerprint, clock.now());
      if (decision.kind !== 'forgotten') throw new KeyTaken(row);
      if (!(await statements.recordOverForgotten(tx, record))) throw new KeyTaken(null);
      await statements.forgetSteps(tx, { scope });
    }
    return freshResult(outcome);
  }

  /** After a failed execution: the key's row if another execution recorded it; null if none or unreadable. */
  private async readAfterFailure(db: Queryable, scope: OperationScope): Promise<RequestRow | null> {
    try {
      return await this.engine.statements.read(db, { scope });
    } catch {
      return null; // the database went away too: the execution's own failure is the answer
    }
  }
}
