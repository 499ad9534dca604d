/**
 * A deterministic failure never leaves a multi-step operation's key pending:
 * - before anything was committed (no step recorded, no call started) the key is freed and a
 *   retry runs afresh;
 * - after that it is stored as failed, with the step and the error, and every retry gets that
 *   failure back without running anything;
 * - a retryable failure still leaves the operation pending for a retry to resume.
 * Only the last counts as stuck (`idem_requests_stuck`). Real PostgreSQL, real HTTP provider; the
 * deterministic failure is PostgreSQL's own 22021 (a NUL byte in a text column).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import {
  isKeyReused,
  isOperationFailed,
  isStepFailed,
  type OperationFailedError,
  type StepFailedError,
} from '../../src/core/errors.js';
import { deriveKey } from '../../src/core/keys.js';
import { sqlStateOf } from '../../src/core/sqlstate.js';
import { createIdemMetrics } from '../../src/observability/prometheus.js';
import { createIdem, type Idem } from '../../src/operations/idem.js';
import type { MultiStepOperation } from '../../src/operations/multi-step.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { startFakeProvider, type FakeProvider } from '../support/fake-provider.js';

describe('multi-step failures', () => {
  let db: TestSchema;
  let provider: FakeProvider;
  let idem: Idem;

  beforeAll(async () => {
    db = await createTestSchema();
    await db.pool.query(
      `CREATE TABLE "${db.schema}".notes (id serial PRIMARY KEY, key text NOT NULL, note text)`,
    );
    provider = await startFakeProvider();
    idem = createIdem({ sql: fromPg(db.pool), schema: db.schema });
  });
  afterAll(async () => {
    await provider.close();
    await db.close();
  });

  const newKey = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
  const spec = (key: string, request: unknown = { note: 'x' }) => ({
    tenant: 'acme',
    operation: 'pay',
    key,
    request,
  });
  /** A local step whose INSERT PostgreSQL refuses every time: 22021, a NUL byte in text. */
  const badNote = (op: MultiStepOperation, name: string, key: string) =>
    op.step(name, (tx) =>
      tx.query(`INSERT INTO "${db.schema}".notes (key, note) VALUES ($1, $2)`, [key, 'nul \u0000 byte']),
    );
  const charge = (op: MultiStepOperation) =>
    op.call('charge', async ({ key, signal }) => {
      const response = await fetch(`${provider.url}/charges`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ amount: 3 }),
        signal,
      });
      return (await response.json()) as { id: string };
    });
  const stuck = async () => {
    const text = await createIdemMetrics({ sql: db.pool, schema: db.schema }).render();
    return Number(/^idem_requests_stuck (\d+)$/m.exec(text)?.[1]);
  };
  const stepRows = async (key: string) =>
    (
      await db.pool.query<{ step: string; kind: string; result: string | null }>(
        `SELECT step, kind, result FROM "${db.schema}".steps WHERE idempotency_key = $1 ORDER BY step`,
        [key],
      )
    ).rows;

  it('before anything was committed: the key is freed and a retry runs afresh', async () => {
    const key = newKey('fresh');
    let runs = 0;
    const attempt = () =>
      idem
        .steps(spec(key), async (op) => {
          runs++;
          await badNote(op, 'note', key);
          return 'never';
        })
        .catch((e: unknown) => e);
    const first = await attempt();
    expect(isOperationFailed(first)).toBe(true);
    expect((first as OperationFailedError).retryable).toBe(false);
    expect(sqlStateOf((first as Error).cause)).toBe('22021');
    expect(await idem.get(spec(key))).toBeNull(); // nothing left behind: not pending, not stuck
    expect(await stuck()).toBe(0);

    const second = await attempt(); // runs again (and fails the same way, still leaving nothing)
    expect(isOperationFailed(second)).toBe(true);
    expect(runs).toBe(2);
    expect(await idem.get(spec(key))).toBeNull();
    // Once the cause is fixed, the same key works.
    const fixed = await idem.steps(spec(key), (op) => op.step('note', async () => 'ok'));
    expect(fixed).toMatchObject({ value: 'ok', replayed: false });
  });

  it('after an external call started: stored as failed with the step and the error; every retry gets it back', async () => {
    const key = newKey('after-call');
    let runs = 0;
    const body = async (op: MultiStepOperation) => {
      runs++;
      const charged = await charge(op);
      await badNote(op, 'record-charge', key);
      return charged.id;
    };
    const first = await idem.steps(spec(key), body).catch((e: unknown) => e);
    expect(isStepFailed(first)).toBe(true);
    const failure = first as StepFailedError;
    expect(failure).toMatchObject({ step: 'record-charge', replayed: false, retryable: false });
    expect(failure.failure).toContain('invalid byte sequence');
    expect(sqlStateOf(failure.cause)).toBe('22021');

    const row = await idem.get(spec(key));
    expect(row).toMatchObject({ state: 'failed', errorStep: 'record-charge', lockedUntil: null });
    expect(row?.error).toContain('invalid byte sequence');
    const steps = await stepRows(key);
    expect(steps.map((r) => [r.step, r.kind])).toEqual([['charge', 'call']]);
    expect(JSON.parse(steps[0]!.result!)).toMatchObject({ id: expect.stringMatching(/^ch_/) as unknown });
    expect(await stuck()).toBe(0); // failed for good is not stuck: nobody will resume it

    const retry = await idem.steps(spec(key), body).catch((e: unknown) => e);
    expect(isStepFailed(retry)).toBe(true);
    expect(retry).toMatchObject({ step: 'record-charge', replayed: true });
    expect(runs).toBe(1); // nothing ran again...
    const chargeKey = deriveKey(spec(key), 'charge');
    expect(provider.calls.filter((c) => c.key === chargeKey)).toHaveLength(1); // ...nothing was charged again
    // The same key with another request is still refused as a reuse.
    const reused = await idem.steps(spec(key, { note: 'other' }), body).catch((e: unknown) => e);
    expect(isKeyReused(reused)).toBe(true);
  });

  it('a call that fails for good is stored at that call: its outcome downstream is unknown', async () => {
    const key = newKey('call-fails');
    const first = await idem
      .steps(spec(key), (op) =>
        op.call('charge', () => Promise.reject(new TypeError('the provider refused the request shape'))),
      )
      .catch((e: unknown) => e);
    expect(first).toMatchObject({ code: 'IDEM_STEP_FAILED', step: 'charge' });
    expect(await idem.get(spec(key))).toMatchObject({
      state: 'failed',
      errorStep: 'charge',
      error: 'TypeError: the provider refused the request shape',
    });
    expect(await stepRows(key)).toEqual([{ step: 'charge', kind: 'call', result: null }]); // started, no answer
  });

  it('after a local step committed (no call): stored as failed, so its writes are not made twice', async () => {
    const key = newKey('after-step');
    const first = await idem
      .steps(spec(key), async (op) => {
        await op.step('first-note', (tx) =>
          tx.query(`INSERT INTO "${db.schema}".notes (key, note) VALUES ($1, 'written once')`, [key]),
        );
        await badNote(op, 'second-note', key);
      })
      .catch((e: unknown) => e);
    expect(first).toMatchObject({ code: 'IDEM_STEP_FAILED', step: 'second-note' });
    await idem.steps(spec(key), async () => undefined).catch(() => undefined);
    const { rows } = await db.pool.query(`SELECT note FROM "${db.schema}".notes WHERE key = $1`, [key]);
    expect(rows).toEqual([{ note: 'written once' }]);
  });

  it('a retryable failure leaves the operation pending with its lease released; the retry resumes it', async () => {
    const key = newKey('retryable');
    const before = await stuck();
    let attempts = 0;
    const body = async (op: MultiStepOperation) => {
      const charged = await charge(op);
      await op.step('confirm', async () => {
        if (++attempts === 1) throw Object.assign(new Error('downstream busy'), { retryable: true });
        return 'confirmed';
      });
      return charged.id;
    };
    const first = await idem.steps(spec(key), body).catch((e: unknown) => e);
    expect(first).toMatchObject({ code: 'IDEM_OPERATION_FAILED', retryable: true });
    const row = await idem.get(spec(key));
    expect(row).toMatchObject({ state: 'pending', recoveryPoint: 'charge', error: null });
    expect(row!.lockedUntil).toBeLessThanOrEqual(Date.now());
    expect(await stuck()).toBe(before + 1); // waiting for its retry: this one does count
    const retry = await idem.steps(spec(key), body);
    expect(retry.replayed).toBe(false);
    expect(await stuck()).toBe(before);
    const chargeKey = deriveKey(spec(key), 'charge');
    expect(provider.calls.filter((c) => c.key === chargeKey)).toHaveLength(1); // recorded: not repeated
  });

  it("an error carrying a status a retry may change (a framework's 503) is retryable; a 4xx is not", async () => {
    class HttpException extends Error {
      constructor(
        message: string,
        private readonly code: number,
      ) {
        super(message);
      }
      getStatus() {
        return this.code;
      }
    }
    const failWith = (status: number) => {
      const key = newKey(`status-${status}`);
      return idem
        .steps(spec(key), async (op) => {
          await charge(op);
          await op.step('confirm', () => Promise.reject(new HttpException('downstream said so', status)));
        })
        .then(
          () => undefined,
          async (e: unknown) => ({ error: e, row: await idem.get(spec(key)) }),
        );
    };
    const busy = (await failWith(503))!;
    expect(busy.error).toMatchObject({ code: 'IDEM_OPERATION_FAILED', retryable: true });
    expect(busy.row).toMatchObject({ state: 'pending', error: null });
    const refused = (await failWith(400))!;
    expect(refused.error).toMatchObject({ code: 'IDEM_STEP_FAILED', step: 'confirm' });
    expect(refused.row).toMatchObject({ state: 'failed', errorStep: 'confirm' });
  });
});
