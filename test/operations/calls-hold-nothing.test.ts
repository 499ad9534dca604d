/**
 * A call to the outside world (`op.call`, a saga step's `{ call }`) holds no transaction, row lock
 * or pooled connection while it runs. Measured on a real PostgreSQL against a real, slow HTTP
 * provider: a slow provider does not starve the pool, no session sits `idle in transaction`, and
 * `idle_in_transaction_session_timeout` (set on most managed PostgreSQL) does not kill a long call.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { isInProgress } from '../../src/core/errors.js';
import { deriveKey } from '../../src/core/keys.js';
import { createIdem, type Idem } from '../../src/operations/idem.js';
import { createSagas, defineSaga, step } from '../../src/workflow/index.js';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { chargeAt, startFakeProvider, type FakeProvider } from '../support/fake-provider.js';
import { repeatEvery } from '../support/poll.js';

const charge = (provider: FakeProvider, key: string, signal?: AbortSignal) =>
  chargeAt(provider, key, 1, signal);

/** A pool whose sessions are findable in pg_stat_activity by their application_name. */
function namedPool(size: number, options: pg.PoolConfig = {}) {
  const name = `idem-calls-${randomBytes(4).toString('hex')}`;
  const pool = new pg.Pool({
    connectionString: databaseUrl(),
    max: size,
    application_name: name,
    ...options,
  });
  return { pool, name };
}

/**
 * Brings the pool and the code to the state of a service that has been running a while: every
 * connection open, idem's statements prepared on them, the code paths compiled. (Cold, the first
 * burst pays connection set-up and JIT: about 170 ms for a connection here, measured.)
 */
async function warm(pool: pg.Pool, size: number, idem: Idem, provider: FakeProvider) {
  const clients = await Promise.all(Array.from({ length: size }, () => pool.connect()));
  for (const client of clients) client.release();
  const run = randomBytes(3).toString('hex');
  for (let round = 0; round < 3; round++) {
    await Promise.all(
      Array.from({ length: size * 2 }, (_, i) =>
        idem.steps({ tenant: 'acme', operation: 'warm-up', key: `${run}-${round}-${i}` }, (op) =>
          op.call('charge', ({ key }) => charge(provider, key)),
        ),
      ),
    );
  }
}

/** Samples the pool's sessions every 25 ms: the most seen `idle in transaction` at once. */
function watchSessions(applicationName: string) {
  const observer = new pg.Client({ connectionString: databaseUrl() });
  let most = 0;
  let samples = 0;
  let running = true;
  const loop = (async () => {
    await observer.connect();
    while (running) {
      const { rows } = await observer.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'`,
        [applicationName],
      );
      most = Math.max(most, rows[0]!.n);
      samples++;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    await observer.end();
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { mostIdleInTransaction: most, samples };
    },
  };
}

/** Runs `SELECT 1` on `pool` every 20 ms: the longest one took (waiting for a connection included). */
const probePool = (pool: pg.Pool) => repeatEvery(20, () => pool.query('SELECT 1'));

/**
 * A card provider that holds every charge until `release()`: how many are out at once is then a
 * fact the test reads, whatever the machine's speed.
 */
async function startGatedProvider() {
  const { createServer } = await import('node:http');
  let out = 0;
  let released = false;
  const waiting: (() => void)[] = [];
  const watchers: { count: number; resolve: () => void }[] = [];
  let charges = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      out++;
      for (const w of watchers.filter((w) => out >= w.count)) w.resolve();
      const answer = () => {
        out--;
        res
          .writeHead(201, { 'content-type': 'application/json' })
          .end(JSON.stringify({ id: `ch_${++charges}` }));
      };
      if (released) answer();
      else waiting.push(answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    provider: { url: `http://127.0.0.1:${port}` } as FakeProvider,
    out: () => out,
    /** Resolves once `count` calls are out at once (the test's own timeout bounds it). */
    whenOut: (count: number) =>
      new Promise<void>((resolve) => (out >= count ? resolve() : watchers.push({ count, resolve }))),
    release() {
      released = true;
      for (const answer of waiting.splice(0)) answer();
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('calls hold no transaction or connection while they run', () => {
  let db: TestSchema;
  let provider: FakeProvider;
  let slow3s: FakeProvider;
  let fast: FakeProvider;

  beforeAll(async () => {
    db = await createTestSchema();
    provider = await startFakeProvider({ latencyMs: 500 });
    slow3s = await startFakeProvider({ latencyMs: 3000 });
    fast = await startFakeProvider();
  });
  afterAll(async () => {
    await fast.close();
    await provider.close();
    await slow3s.close();
    await db.close();
  });

  /** 40 operations, each one 500 ms call, all at once, on a pool of 8, with probes running. */
  async function fortyOperations(idem: Idem, body: 'call' | 'step-with-call-inside') {
    const run = randomBytes(3).toString('hex');
    const started = performance.now();
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        idem.steps({ tenant: 'acme', operation: 'pay', key: `${run}-${i}` }, (op) =>
          body === 'call'
            ? op.call('charge', ({ key, signal }) => charge(provider, key, signal))
            : op.step('charge', (_tx, { key }) => charge(provider, key)),
        ),
      ),
    );
    return { elapsedMs: performance.now() - started, results };
  }

  it('40 operations × one call on a pool of 8: all 40 calls are out at once while the pool holds no connection and nobody is idle in transaction', async () => {
    // Structure, not time: a provider that holds every call until the test lets go. Were a call
    // holding its pooled connection, no more than 8 could be out at once and the other 32 would
    // wait for one; as it is, all 40 are out together, and meanwhile the pool has nothing checked
    // out and no session of it sits idle in transaction. (The time the burst takes is measured in
    // bench/steps.bench.ts.)
    const { pool, name } = namedPool(8);
    const gate = await startGatedProvider();
    try {
      const idem = createIdem({ sql: fromPg(pool), schema: db.schema });
      await warm(pool, 8, idem, fast);
      const run = randomBytes(3).toString('hex');
      const burst = Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          idem.steps({ tenant: 'acme', operation: 'pay', key: `${run}-${i}` }, (op) =>
            op.call('charge', ({ key, signal }) => charge(gate.provider, key, signal)),
          ),
        ),
      );
      await gate.whenOut(40);
      expect(gate.out()).toBe(40);
      // Every call is out: the pool holds nothing for them (a heartbeat's renewal is one short
      // statement every 10 s, far from now), and the database sees no transaction left open.
      expect(pool.totalCount - pool.idleCount).toBe(0);
      expect(pool.waitingCount).toBe(0);
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle'`,
        [name],
      );
      expect(rows[0]!.n).toBe(0);
      await pool.query('SELECT 1'); // the application's own statement gets a connection at once
      gate.release();
      const results = await burst;
      expect(results.every((r) => r.state === 'completed' && !r.replayed)).toBe(true);
      expect(new Set(results.map((r) => r.value.id)).size).toBe(40);
    } finally {
      gate.release();
      await gate.close();
      await pool.end();
    }
  });

  it('control: the same call made inside a step holds the pool (why calls exist)', async () => {
    const { pool, name } = namedPool(8);
    try {
      const idem = createIdem({ sql: fromPg(pool), schema: db.schema });
      await warm(pool, 8, idem, fast);
      const sessions = watchSessions(name);
      const probe = probePool(pool);
      const { elapsedMs } = await fortyOperations(idem, 'step-with-call-inside');
      const probed = await probe.stop();
      const seen = await sessions.stop();
      // 40 calls of 500 ms, 8 at a time: at least 5 rounds; SELECT 1 waits for a round to end.
      expect(elapsedMs).toBeGreaterThan(2400);
      expect(probed.longestMs).toBeGreaterThan(200);
      expect(seen.mostIdleInTransaction).toBeGreaterThanOrEqual(4);
    } finally {
      await pool.end();
    }
  });

  describe('with idle_in_transaction_session_timeout = 1 s on every session', () => {
    const strict = () => namedPool(4, { options: '-c idle_in_transaction_session_timeout=1000' });

    it('an operation whose call takes 3 s (3 × its lease, kept by heartbeats) completes normally', async () => {
      const { pool } = strict();
      try {
        const idem = createIdem({ sql: fromPg(pool), schema: db.schema, leaseMs: 1000, waitMs: 0 });
        const spec = { tenant: 'acme', operation: 'slow', key: `slow-${randomBytes(4).toString('hex')}` };
        const running = idem.steps(spec, async (op) => {
          const recorded = await op.step('record', async (tx) => {
            await tx.query('SELECT 1');
            return 'recorded';
          });
          const answer = await op.call('charge', ({ key, signal }) => charge(slow3s, key, signal));
          return { recorded, charge: answer.id };
        });
        // Past the first lease, a retry finds the holder alive (its heartbeat renewed the lease).
        await new Promise((resolve) => setTimeout(resolve, 1600));
        const duplicate = await idem
          .steps(spec, async () => ({ recorded: 'x', charge: 'x' }))
          .catch((e: unknown) => e);
        expect(isInProgress(duplicate)).toBe(true);
        const result = await running;
        expect(result.value.recorded).toBe('recorded');
        expect(result.value.charge).toMatch(/^ch_/);
        expect(slow3s.calls.filter((c) => c.key === deriveKey(spec, 'charge'))).toHaveLength(1);
        const row = await idem.get(spec);
        expect(row).toMatchObject({ state: 'completed', fence: 1 });
      } finally {
        await pool.end();
      }
    });

    it('a saga whose action calls out for 3 s completes normally', async () => {
      const { pool } = strict();
      try {
        const sagas = createSagas({ sql: fromPg(pool), schema: db.schema, leaseMs: 1000 });
        const slowSaga = defineSaga<{ amount: number }>({
          name: 'slow-saga',
          steps: [
            step({
              name: 'charge',
              call: ({ key, signal }) => charge(slow3s, key, signal),
              compensate: async () => undefined,
            }),
          ],
        });
        const key = `saga-${randomBytes(4).toString('hex')}`;
        const { value } = await sagas.run(slowSaga, { tenant: 'acme', key, input: { amount: 1 } });
        expect((value as { charge: { id: string } }).charge.id).toMatch(/^ch_/);
        expect((await sagas.get({ tenant: 'acme', saga: 'slow-saga', key }))?.status).toBe('completed');
      } finally {
        await pool.end();
      }
    });

    it('control: the same 3 s call inside a step is killed by the timeout', async () => {
      const { pool } = strict();
      pool.on('error', () => undefined); // the server ends the idle session
      try {
        const idem = createIdem({ sql: fromPg(pool), schema: db.schema });
        const key = `killed-${randomBytes(4).toString('hex')}`;
        const outcome = await idem
          .steps({ tenant: 'acme', operation: 'slow', key }, (op) =>
            op.step('charge', (_tx, step) => charge(slow3s, step.key)),
          )
          .catch((e: unknown) => e);
        expect(outcome).toBeInstanceOf(Error);
      } finally {
        await pool.end();
      }
    });
  });
});
