/**
 * Claim-first recording (`recording: 'claim'`): the key is claimed inside the transaction before
 * the handler runs, and the claim is completed after it. A concurrent duplicate's claim waits on
 * the key's index entry until the first one's transaction ends, so a handler runs once even when
 * it calls the outside world; the price is one statement more than commit-time recording.
 */
import type { Queryable, Transaction } from '../core/sql.js';
import {
  attempts,
  bounded,
  contextOf,
  isAnswer,
  replayBeforeTransaction,
  waitInterval,
  type Handler,
  type KeyedEngine,
  type RecordingStrategy,
} from './keyed-run.js';
import { freshResult, toOutcome, type OperationResult } from './outcome.js';
import type { PreparedSpec } from './prepared-spec.js';
import { decide, inProgress } from './resolve-existing.js';

export class ClaimFirstRecording<Client> implements RecordingStrategy<Client> {
  constructor(private readonly engine: KeyedEngine<Client>) {}

  async run<T>(prepared: PreparedSpec, handler: Handler<T, Client>): Promise<OperationResult<T>> {
    const { engine } = this;
    const deadline = engine.clock.now() + prepared.waitMs;
    const front = await replayBeforeTransaction<T>(engine, prepared, deadline);
    if (isAnswer(front)) return front;
    return attempts(engine, prepared, {
      attempt: () => engine.sql.transaction((tx) => this.claimAndRun(tx, prepared, handler)),
    });
  }

  /** `runIn`: the claim, the handler and the completion, in the caller's transaction. */
  runIn<T, TxClient>(
    tx: Transaction<TxClient>,
    prepared: PreparedSpec,
    handler: Handler<T, TxClient>,
  ): Promise<OperationResult<T>> {
    return this.claimAndRun(tx, prepared, handler);
  }

  private async claimAndRun<T, TxClient>(
    tx: Transaction<TxClient>,
    prepared: PreparedSpec,
    handler: Handler<T, TxClient>,
  ): Promise<OperationResult<T>> {
    const { clock, statements } = this.engine;
    const { scope } = prepared;
    const deadline = clock.now() + prepared.waitMs;
    let fence = await this.claim(tx, prepared, deadline);
    while (fence === null) {
      // Someone else holds or held the key. Their transaction has finished (the claim waited for
      // it), so the row is committed and readable.
      const row = await statements.read(tx, { scope });
      if (!row) {
        fence = await this.claim(tx, prepared, deadline); // swept in between: claim afresh
        continue;
      }
      const now = clock.now();
      const decision = decide<T>(scope, row, prepared.fingerprint, now);
      if (decision.kind === 'replay') return decision.result;
      if (decision.kind === 'forgotten') {
        const reclaimed = await statements.reclaimForgotten(tx, this.claimOf(prepared));
        if (reclaimed !== null) {
          await statements.forgetSteps(tx, { scope });
          fence = reclaimed;
        }
        continue;
      }
      // A committed pending row belongs to a multi-step execution: wait for it, boundedly.
      if (now >= deadline) throw inProgress(scope, row, now);
      await clock.sleep(Math.min(50, deadline - now));
    }
    const outcome = toOutcome(await handler(tx, contextOf(scope)));
    await statements.complete(tx, { scope, fence, outcome, now: clock.now() });
    return freshResult(outcome);
  }

  /** Returns the fence (1) when this transaction claimed the key, null when it already exists. */
  private async claim(db: Queryable, prepared: PreparedSpec, deadline: number): Promise<number | null> {
    const { clock, statements } = this.engine;
    const claimed = await bounded(clock, prepared, () =>
      statements.claim(db, {
        ...this.claimOf(prepared),
        wait: waitInterval(prepared, clock.now(), deadline),
      }),
    );
    return claimed ? 1 : null;
  }

  /** A single-transaction claim: no lease (the transaction holds the key), the retention from now. */
  private claimOf({ scope, fingerprint, retention, cause }: PreparedSpec) {
    return { scope, fingerprint, retention, cause, lockedUntil: null, now: this.engine.clock.now() };
  }
}
