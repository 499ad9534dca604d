/**
 * `53300 too many clients` and `25006 read-only` injected at each step of the demo's multi-step
 * payment (demo/payments.ts): `record-payment` (a local step), `charge` (a call to the provider,
 * between transactions) and `record-charge` (a local step, then the completion). The demo runs
 * through the fault proxy; the fault is timed by the step itself — the proxy sees the step's own
 * statement go by (`INSERT INTO …payments`, `UPDATE …payments SET status`), or the provider
 * receives the charge — and strikes there:
 * - `53300, the database full`: the statement's connection and every other one is cut (the
 *   charge: every session is terminated with pg_terminate_backend, 57P01), and new connections are
 *   refused with 53300 until the test ends the fault;
 * - `53300 once`: the same cut, but only the next connection is refused; after it the database is
 *   fine — so a failure that idem decided to store would be stored;
 * - `25006, a read-only window`: every connection cut, new ones read-only until the end;
 * - `25006 on that statement`: only the step's statement fails, with PostgreSQL's own 25006
 *   (`transaction_read_only` set on its connection just before it); everything else is writable.
 * Then the fault ends and the client retries the same key. What must hold: every answer before
 * the last is a 503 with Retry-After (or a 409 while a lease is held), never a 500; the key is
 * never stored `failed` (watched from a direct connection throughout); the retry completes the
 * payment (201, `succeeded`); one charge at the provider; one ledger credit. And when the client
 * never retries (it gave up after the 503), the demo's completer finishes the payment by itself
 * once the fault is over, and the client that comes back later gets it replayed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { randomSchema, type DemoHandle } from '../../demo/server.js';
import { databaseUrl } from '../support/database.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';
import { captureStderr } from '../support/faults/demo-under-fault.js';
import { attemptOnce, newClientLog, newIntent, pay, type Intent } from '../support/faults/payment-clients.js';
import { startPgProxyTo, type PgProxy } from '../support/faults/pg-proxy.js';

type Step = 'record-payment' | 'charge' | 'record-charge';
type Fault =
  '53300, the database full' | '53300 once' | '25006, a read-only window' | '25006 on that statement';
const steps: Step[] = ['record-payment', 'charge', 'record-charge'];
const faults: Fault[] = [
  '53300, the database full',
  '53300 once',
  '25006, a read-only window',
  '25006 on that statement',
];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each([true, false])('faults at each step of a payment, pipeline %s', (pipeline) => {
  const schema = randomSchema('idem_steps');
  const demoSchema = `${schema}_demo`;
  let proxy: PgProxy;
  let demo: DemoHandle;
  let direct: pg.Pool;
  let stderr: ReturnType<typeof captureStderr>;
  /** What the provider hook does when the charge arrives (armed by a case). */
  let onCharge: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    proxy = await startPgProxyTo(databaseUrl());
    direct = new pg.Pool({ connectionString: databaseUrl(), max: 3 });
    demo = await startTestDemo(schema, {
      databaseUrl: proxy.url(databaseUrl()),
      directUrl: databaseUrl(),
      pipeline,
      quiet: true,
      // A crashed holder's lease lapses quickly, so a case never waits long for a takeover.
      leaseMs: 2000,
      // The charge waits, so the fault switched on when it arrives is on before it returns.
      providerLatencyMs: 300,
    });
    demo.provider!.server.prependListener('request', (req: { method?: string; url?: string }) => {
      if (req.method === 'POST' && req.url === '/charges' && onCharge) {
        const strike = onCharge;
        onCharge = undefined;
        void strike();
      }
    });
  });
  afterAll(async () => {
    await proxy?.close();
    await demo?.close();
    await direct?.end();
    await dropDemoSchemas(schema);
  });

  /** Terminates every session the demo has through the proxy (57P01 to each). */
  const terminateAll = async () => {
    await direct.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY($1)', [
      proxy.backendPorts(),
    ]);
  };

  /** Switches the fault on, at a statement of the step or when the provider receives the charge. */
  function arm(step: Step, fault: Fault): { fired: Promise<void>; end: () => void } {
    const end = () => {
      proxy.clearFaults();
      if (fault === '25006, a read-only window') proxy.resetAll('read-only');
    };
    const strikeNow = (): 'reset' | 'read-only' | 'pass' => {
      switch (fault) {
        case '53300, the database full':
          proxy.refuse(true);
          proxy.resetAll();
          return 'reset';
        case '53300 once':
          proxy.refuse({ count: 1 });
          proxy.resetAll();
          return 'reset';
        case '25006, a read-only window':
          proxy.readOnly(true);
          proxy.resetAll();
          return 'reset';
        case '25006 on that statement':
          return 'read-only';
      }
    };
    if (step === 'charge') {
      if (fault === '25006 on that statement') {
        // The call's result is recorded in one statement after it (`recordCall`).
        return { fired: proxy.onStatement(/recorded AS \(/, 'read-only'), end };
      }
      const fired = new Promise<void>((resolve) => {
        onCharge = async () => {
          // Every session ends with 57P01 while the provider is charging; then 53300 or read-only.
          if (fault.startsWith('53300')) proxy.refuse(fault === '53300 once' ? { count: 1 } : true);
          else proxy.readOnly(true);
          await terminateAll();
          resolve();
        };
      });
      return { fired, end };
    }
    const pattern =
      step === 'record-payment'
        ? new RegExp(`INSERT INTO ${demoSchema}\\.payments`)
        : new RegExp(`UPDATE ${demoSchema}\\.payments SET status`);
    return { fired: proxy.onStatement(pattern, () => strikeNow()), end };
  }

  /** Watches the key's row from a direct connection: every state it was seen in. */
  function watch(key: string) {
    const states = new Set<string>();
    let stop = false;
    const loop = (async () => {
      while (!stop) {
        const { rows } = await direct.query<{
          state: string;
          error: string | null;
          error_step: string | null;
        }>(`SELECT state, error, error_step FROM "${schema}".requests WHERE idempotency_key = $1`, [key]);
        for (const r of rows)
          states.add(r.state === 'failed' ? `failed at ${r.error_step}: ${r.error}` : r.state);
        await sleep(25);
      }
    })();
    return {
      states,
      async stop() {
        stop = true;
        await loop;
      },
    };
  }

  /**
   * One case: the fault strikes at `step`, the first attempt is answered, the fault ends; then the
   * client retries the same key until it is answered — or, `abandoned`, never comes back, and the
   * demo's completer must finish the payment on its own (its stored answer is then replayed).
   */
  async function strike(step: Step, fault: Fault, abandoned: boolean) {
    stderr = captureStderr();
    const intent: Intent = newIntent(`step-${step}`);
    const watcher = watch(intent.key);
    const answers: string[] = [];
    try {
      // The demo is healthy before the case (the previous case ended its fault).
      const warm = newIntent('warm');
      await pay(demo.url, warm, newClientLog(), { deadlineMs: 20_000 });
      expect(warm.finalStatus, 'the demo did not take a payment before the case').toBe(201);

      const { fired, end } = arm(step, fault);
      const first = await attemptOnce(demo.url, intent, 30_000);
      answers.push(`${first.status} ${first.body ?? first.cause ?? ''}`);
      await Promise.race([
        fired,
        sleep(5000).then(() => {
          throw new Error(`the fault at ${step} never struck (first answer ${first.status})`);
        }),
      ]);
      const during =
        abandoned || fault === '53300 once' || fault === '25006 on that statement'
          ? undefined
          : await attemptOnce(demo.url, intent, 30_000);
      if (during) answers.push(`${during.status} ${during.body ?? during.cause ?? ''}`);
      end();
      const ended = Date.now();

      const log = newClientLog();
      let completedMs: number | undefined;
      if (abandoned) {
        // No retry: the completer must take it from here (lease + its poll interval, and then some).
        for (;;) {
          const { rows } = await direct.query<{ state: string }>(
            `SELECT state FROM "${schema}".requests WHERE idempotency_key = $1`,
            [intent.key],
          );
          if (rows[0]?.state === 'completed' || Date.now() - ended > 30_000) {
            completedMs = rows[0]?.state === 'completed' ? Date.now() - ended : undefined;
            break;
          }
          await sleep(100);
        }
      }
      // The client comes back (or retries at once): the same key answers the payment.
      await pay(demo.url, intent, log, { deadlineMs: 40_000, attemptTimeoutMs: 15_000 });
      await watcher.stop();
      const report = {
        answers: [...answers, ...intent.seen.map((x) => `retry: ${x}`)],
        final: `${intent.finalStatus} ${intent.finalBody?.slice(0, 200)}`,
        ...(abandoned ? { completedByCompleterMs: completedMs ?? 'never within 30 s' } : {}),
        states: [...watcher.states],
        violations: log.violations,
        logs: [...stderr.lines.keys()].map((l) => l.replace(/\s+/g, ' ').slice(0, 300)),
      };
      console.log(
        `[step faults] pipeline ${pipeline}, ${fault} at ${step}${abandoned ? ', abandoned' : ''}: ${JSON.stringify(report, null, 1)}`,
      );

      // Never a 500, and no 503 without Retry-After, whatever the moment.
      for (const a of [first, during].filter((x) => x !== undefined)) {
        expect(['201', '503', '409'], `answer during the fault: ${a.status} ${a.body ?? a.cause}`).toContain(
          a.status,
        );
        if (a.status === '503') expect(a.retryAfter, 'a 503 without Retry-After').not.toBeNull();
      }
      expect(log.violations).toEqual([]);
      expect([...watcher.states].filter((x) => x.startsWith('failed'))).toEqual([]);
      if (abandoned && first.status !== '201') {
        expect(completedMs, 'the completer did not complete the abandoned payment within 30 s').not.toBe(
          undefined,
        );
        expect(intent.seen, 'the completed payment is replayed to the client that comes back').toEqual([]);
      }
      expect(intent.finalStatus, report.final).toBe(201);

      const { rows: payments } = await direct.query<{ id: string; status: string }>(
        `SELECT id, status FROM ${demoSchema}.payments WHERE customer = $1`,
        [intent.customer],
      );
      expect(payments).toEqual([{ id: intent.paymentId, status: 'succeeded' }]);
      const charges = [...demo.provider!.charges.values()].filter((c) => c.customer === intent.customer);
      expect(charges).toHaveLength(1);
      const { rows: request } = await direct.query<{ state: string }>(
        `SELECT state FROM "${schema}".requests WHERE idempotency_key = $1`,
        [intent.key],
      );
      expect(request).toEqual([{ state: 'completed' }]);
      for (let i = 0; i < 100; i++) {
        const { rows } = await direct.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${demoSchema}.ledger WHERE payment_id = $1 AND kind = 'credit'`,
          [intent.paymentId],
        );
        if (rows[0]!.n > 0) break;
        await sleep(100);
      }
      await sleep(200);
      const { rows: credits } = await direct.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${demoSchema}.ledger WHERE payment_id = $1 AND kind = 'credit'`,
        [intent.paymentId],
      );
      expect(credits[0]!.n, 'ledger credits').toBe(1);
    } finally {
      proxy.clearFaults();
      proxy.resetAll('read-only');
      onCharge = undefined;
      await watcher.stop();
      stderr.restore();
    }
  }

  for (const step of steps) {
    for (const fault of faults) {
      it(`${fault} at ${step}: the retry with the same key completes it; never stored failed; one charge`, () =>
        strike(step, fault, false));
    }
    it(`53300, the database full at ${step}, and the client never retries: the completer completes it; one charge`, () =>
      strike(step, '53300, the database full', true));
  }
});
