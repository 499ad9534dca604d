/**
 * idem's contract on a real high-availability PostgreSQL: a pg_auto_failover formation (a monitor
 * and two nodes, synchronous replication, test/support/ha/formation.ts) started by this file, under
 * a planned failover and a kill -9 of the primary, with node-postgres (through `primaryClient`) and
 * postgres.js (a multi-host URL with `target_session_attrs=primary`) side by side: two
 * applications on one database, 16 clients each, through the same fault.
 *
 * Every client performs intents one after another: keyed operations (`idem.run`, inserting a
 * business row) and multi-step operations (`idem.steps`: a local step, a call to a provider that
 * dedupes by key, another local step). Every intent is retried with the SAME key on a retryable
 * failure until it is acknowledged (within a budget), as real clients do; an attempt that hears
 * nothing for 20 s is abandoned and retried, as an HTTP client's timeout does. After the fault,
 * read from the new primary:
 * - 0 duplicates: at most one business row per key (the business tables have no unique key:
 *   only idem stands between a retry and a second row);
 * - 0 lost: every acknowledged intent has its business rows and a completed idem record;
 * - 0 stuck: no idem record of the run is pending or failed once the retries settled;
 * - nothing unhandled: no uncaught exception or unhandled rejection in the process.
 * One line per driver and fault gives the counts and the outage as the clients saw it.
 *
 * postgres.js 3.4.9 (the latest release) has an open defect on a connection lost inside
 * `sql.begin`: an uncaught TypeError from `nextWrite` (porsager/postgres#1208, #1154, fix proposed
 * in #1209 and #1168) and connections that never send again, so calls on them never settle. Both
 * are counted and printed; for postgres.js up to 3.4.9 they do not fail the run, for any later
 * version they do (so a release that does not fix them is noticed). Nothing else is tolerated.
 *
 * Under CI=true a missing pg_autoctl fails this file; locally it skips, loudly.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, pgConnectionDefaults, primaryClient } from 'idem/pg';
import { fromPostgresJs } from 'idem/postgres';
import { createIdem, isIdemError, isRetryable, migrate, type Sql, sqlStateOf } from 'idem';
import {
  requirePgAutoFailover,
  startFormation,
  type FaultReport,
  type Formation,
} from '../support/ha/formation.js';

const tools = requirePgAutoFailover();

const clients = 16;
/**
 * The monitor's failure detection: shortened by default (test/support/ha/formation.ts, `fastDetection`);
 * `IDEM_HA_DETECTION=defaults` keeps pg_auto_failover's own (a crashed primary is replaced after
 * ~50 s), to measure the outage and retry budget a production formation needs.
 */
const detection = process.env.IDEM_HA_DETECTION === 'defaults' ? 'defaults' : 'fast';
/** How long one intent may keep retrying. The issue saw clients need up to ~35 s. */
const retryBudgetMs = detection === 'fast' ? 60_000 : 120_000;
/** A client gives up on an attempt that has not answered in this long, and retries the key. */
const attemptTimeoutMs = 20_000;
/** Lease of the multi-step operations: a holder whose connection died is taken over after it. */
const leaseMs = 10_000;

/** postgres.js releases with the defects described above. */
const postgresJsVersion = (
  JSON.parse(readFileSync(new URL('../../node_modules/postgres/package.json', import.meta.url), 'utf8')) as {
    version: string;
  }
).version;
const postgresJsKnownDefective = compareVersions(postgresJsVersion, '3.4.9') <= 0;

/** The uncaught TypeError of postgres.js's write after its socket was closed. */
function isPostgresJsNextWriteCrash(error: unknown): boolean {
  return (
    error instanceof TypeError &&
    /reading 'write'/.test(error.message) &&
    /nextWrite/.test(error.stack ?? '') &&
    /postgres[\\/]src[\\/]connection\.js/.test(error.stack ?? '')
  );
}

interface Driver {
  name: 'node-postgres' | 'postgres.js';
  sql: Sql;
  /** Connection errors reported outside any call (idle pooled connections), counted. */
  idleErrors: () => number;
  end(): Promise<void>;
}

describe.skipIf(!tools)('idem on a pg_auto_failover formation with synchronous replication', () => {
  let formation: Formation;
  let admin: pg.Pool;
  const schema = `idem_ha_${randomBytes(4).toString('hex')}`;
  const unhandled: string[] = [];
  const postgresJsCrashes: string[] = [];
  const withStack = (error: unknown) =>
    `${describeError(error)}${error instanceof Error ? ` at ${error.stack?.split('\n').slice(1, 4).join(' / ')}` : ''}`;
  const onUncaught = (error: unknown) => {
    if (isPostgresJsNextWriteCrash(error)) postgresJsCrashes.push(withStack(error));
    else unhandled.push(`uncaughtException: ${withStack(error)}`);
  };
  const onUnhandled = (reason: unknown) => unhandled.push(`unhandledRejection: ${withStack(reason)}`);

  beforeAll(async () => {
    process.on('uncaughtException', onUncaught);
    process.on('unhandledRejection', onUnhandled);
    formation = await startFormation(tools!, { detection, log: (line) => console.log(line) });
    console.log(`[ha] formation started in ${(formation.startedInMs / 1000).toFixed(1)} s`);
    admin = new pg.Pool({
      ...pgConnectionDefaults,
      user: 'postgres',
      database: 'postgres',
      max: 2,
      Client: primaryClient(pg.Client, { hosts: formation.hosts }),
    });
    admin.on('error', () => undefined);
    await migrate(fromPg(admin), { schema });
    // No unique constraint on the key: a second execution of an intent would show as a second row.
    await admin.query(
      `CREATE TABLE "${schema}".orders (id bigserial PRIMARY KEY, key text NOT NULL, client int NOT NULL)`,
    );
    await admin.query(
      `CREATE TABLE "${schema}".ledger (id bigserial PRIMARY KEY, key text NOT NULL, charge text NOT NULL)`,
    );
  }, 180_000);

  afterAll(async () => {
    await admin?.end().catch(() => undefined);
    await formation?.stop();
    process.off('uncaughtException', onUncaught);
    process.off('unhandledRejection', onUnhandled);
  }, 60_000);

  const openDrivers = (): Driver[] => {
    let idle = 0;
    const pool = new pg.Pool({
      ...pgConnectionDefaults, // connect timeout, keepalive, query and statement bounds, lifetime
      user: 'postgres',
      database: 'postgres',
      max: clients,
      Client: primaryClient(pg.Client, { hosts: formation.hosts }),
    });
    // Idle pooled connections that the fault cuts report here; without a listener that error
    // would end the process. Checked-out clients get one from fromPg.
    pool.on('error', () => idle++);
    // `primary`, not `read-write`: on PostgreSQL 14+ postgres.js decides `read-write` from the
    // reported default_transaction_read_only, which a standby reports off.
    const sql = postgres(formation.url({ target_session_attrs: 'primary' }), {
      max: clients,
      connect_timeout: 5,
      idle_timeout: 10,
      max_lifetime: 30 * 60,
      keep_alive: 10,
      onnotice: () => undefined,
    });
    return [
      { name: 'node-postgres', sql: fromPg(pool), idleErrors: () => idle, end: () => pool.end() },
      {
        name: 'postgres.js',
        sql: fromPostgresJs(sql),
        idleErrors: () => 0,
        end: () => sql.end({ timeout: 2 }),
      },
    ];
  };

  const faults: [string, (f: Formation) => Promise<FaultReport>][] = [
    ['a planned failover', (f) => f.failover()],
    ['a kill -9 of the primary', (f) => f.killPrimary()],
  ];

  for (const [faultName, fault] of faults) {
    it(
      `node-postgres and postgres.js, ${clients} clients each, through ${faultName}: 0 duplicates, 0 lost, 0 stuck, nothing unhandled`,
      async () => {
        const crashesBefore = postgresJsCrashes.length;
        const drivers = openDrivers();
        const loads = drivers.map(
          (d) =>
            new Load(
              createIdem({ sql: d.sql, schema, leaseMs }),
              schema,
              `${d.name}/${faultName.replace(/\W+/g, '-')}`,
            ),
        );
        let report: FaultReport;
        try {
          for (const load of loads) load.start(clients);
          // Under way before the fault…
          await Promise.all(loads.map((load) => load.acknowledged(clients * 2, 15_000)));
          const faultAt = Date.now();
          for (const load of loads) load.faultAt = faultAt;
          report = await fault(formation);
          await sleep(2000); // …and after it, on the healthy formation.
        } finally {
          await Promise.all(loads.map((load) => load.stop()));
          await Promise.all(drivers.map((d) => d.end().catch(() => undefined)));
        }
        const crashes = postgresJsCrashes.slice(crashesBefore);
        const summaries: string[] = [];
        for (const [i, load] of loads.entries()) {
          const driver = drivers[i]!;
          const verdict = await load.verify(admin);
          const summary = load.summary(
            driver.name,
            faultName,
            report,
            verdict,
            driver.idleErrors(),
            driver.name === 'postgres.js' ? crashes.length : 0,
          );
          console.log(summary);
          summaries.push(summary);
          expect(load.hung, summary).toEqual([]);
          expect(load.nonRetryable, summary).toEqual([]);
          expect(load.gaveUp, summary).toEqual([]);
          expect(verdict.duplicates, summary).toEqual([]);
          expect(verdict.lost, summary).toEqual([]);
          expect(verdict.stuck, summary).toEqual([]);
          expect(verdict.providerKeysPerIntent, summary).toEqual([]);
          // The fault was felt (the test exercised it) and every intent still got its answer.
          expect(load.retries, summary).toBeGreaterThan(0);
          expect(load.acked.size, summary).toBe(load.started);
          if (driver.name === 'node-postgres' || !postgresJsKnownDefective) {
            expect(load.neverSettled, summary).toEqual([]);
          }
        }
        expect(unhandled, summaries.join('\n')).toEqual([]);
        if (crashes.length > 0) {
          console.warn(
            `[ha] postgres.js ${postgresJsVersion}: ${crashes.length} uncaught TypeError(s) from nextWrite ` +
              `(porsager/postgres#1208): an application without an uncaughtException handler would have ended. ` +
              `First: ${crashes[0]}`,
          );
        }
        if (!postgresJsKnownDefective) expect(crashes, summaries.join('\n')).toEqual([]);
      },
      50_000 + 2 * retryBudgetMs,
    );
  }
});

interface Verdict {
  duplicates: string[];
  lost: string[];
  stuck: string[];
  /** Multi-step intents whose provider saw more than one distinct key (a key must travel unchanged). */
  providerKeysPerIntent: string[];
}

type Idem = ReturnType<typeof createIdem>;

class AttemptTimeout extends Error {
  readonly retryable = true;
  constructor() {
    super(`no answer in ${attemptTimeoutMs} ms: the client gave up on this attempt`);
    this.name = 'AttemptTimeout';
  }
}

/** Clients performing intents, each retried with the same key until acknowledged. */
class Load {
  faultAt = 0;
  started = 0;
  retries = 0;
  readonly acked = new Map<string, 'run' | 'steps'>();
  readonly ackTimes: number[] = [];
  readonly failures = new Map<string, number>();
  readonly nonRetryable: string[] = [];
  readonly gaveUp: string[] = [];
  /** Calls the client abandoned (attempt timeout) that had not settled when the run ended. */
  readonly neverSettled: string[] = [];
  /** Calls that never returned while the run was stopping (the safety net of `stop`). */
  readonly hung: string[] = [];
  /** The longest time an intent took from its first attempt to its acknowledgement. */
  longestIntentMs = 0;
  /** What the provider was called with, per intent: the derived keys. */
  private readonly providerKeys = new Map<string, Set<string>>();
  private readonly abandoned = new Map<object, string>();
  private readonly inFlight = new Map<
    number,
    { key: string; kind: string; attempt: number; since: number }
  >();
  private stopping = false;
  private stopped: Promise<void> | undefined;
  private running: Promise<void>[] = [];

  constructor(
    private readonly idem: Idem,
    private readonly schema: string,
    private readonly tenant: string,
  ) {}

  start(n: number) {
    this.running = Array.from({ length: n }, (_, c) => this.client(c));
  }

  async acknowledged(n: number, timeoutMs: number) {
    const deadline = Date.now() + timeoutMs;
    while (this.acked.size < n && Date.now() < deadline) await sleep(20);
  }

  /**
   * Lets every client finish its current intent, then gives abandoned calls a last chance to
   * settle. Bounded: a call that never returns is reported with what it was doing, not a hung test.
   */
  stop(): Promise<void> {
    this.stopped ??= this.settle();
    return this.stopped;
  }

  private async settle() {
    this.stopping = true;
    const settled = await Promise.race([
      Promise.all(this.running).then(() => true),
      sleep(retryBudgetMs + attemptTimeoutMs + 15_000).then(() => false),
    ]);
    if (!settled) {
      for (const [c, call] of this.inFlight) {
        this.hung.push(
          `client ${c}: ${call.kind} ${call.key}, attempt ${call.attempt}, for ${Date.now() - call.since} ms`,
        );
      }
    }
    const deadline = Date.now() + 10_000;
    while (this.abandoned.size > 0 && Date.now() < deadline) await sleep(50);
    this.neverSettled.push(...this.abandoned.values());
  }

  private async client(c: number) {
    for (let i = 0; !this.stopping; i++) {
      const kind = i % 2 === 0 ? 'run' : 'steps';
      const key = `${c}-${i}-${randomBytes(3).toString('hex')}`;
      this.started++;
      try {
        await this.attempts(key, kind, c);
      } finally {
        this.inFlight.delete(c);
      }
    }
  }

  private async attempts(key: string, kind: 'run' | 'steps', c: number) {
    const first = Date.now();
    for (let attempt = 1; ; attempt++) {
      this.inFlight.set(c, { key, kind, attempt, since: Date.now() });
      try {
        await this.withTimeout(
          kind === 'run' ? this.run(key, c) : this.steps(key, c),
          `${kind} ${key} #${attempt}`,
        );
        const now = Date.now();
        this.acked.set(key, kind);
        this.ackTimes.push(now);
        this.longestIntentMs = Math.max(this.longestIntentMs, now - first);
        return;
      } catch (error) {
        const reason = describeError(error);
        this.failures.set(reason, (this.failures.get(reason) ?? 0) + 1);
        if (!isRetryable(error)) {
          this.nonRetryable.push(`${kind} ${key} attempt ${attempt}: ${reason}`);
          if (attempt >= 3) return void this.gaveUp.push(`${key} (non-retryable)`);
        }
        if (Date.now() - first > retryBudgetMs) {
          return void this.gaveUp.push(`${key} after ${attempt} attempts`);
        }
        this.retries++;
        // Capped exponential backoff with jitter, as a client library does.
        await sleep(Math.min(1000, 50 * 2 ** Math.min(attempt, 5)) * (0.5 + Math.random() / 2));
      }
    }
  }

  /** The call, or an `AttemptTimeout` after `attemptTimeoutMs`; an abandoned call is watched. */
  private withTimeout<T>(call: Promise<T>, label: string): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const token = {};
        this.abandoned.set(token, label);
        call.then(
          () => this.abandoned.delete(token),
          () => this.abandoned.delete(token),
        );
        reject(new AttemptTimeout());
      }, attemptTimeoutMs);
    });
    return Promise.race([call, timeout]).finally(() => clearTimeout(timer));
  }

  private run(key: string, c: number) {
    return this.idem.run({ tenant: this.tenant, operation: 'order', key, request: { c } }, async (tx) => {
      await tx.query(`INSERT INTO "${this.schema}".orders (key, client) VALUES ($1, $2)`, [key, c]);
      return { key };
    });
  }

  private steps(key: string, c: number) {
    return this.idem.steps({ tenant: this.tenant, operation: 'pay', key, request: { c } }, async (op) => {
      await op.step('order', async (tx) => {
        await tx.query(`INSERT INTO "${this.schema}".orders (key, client) VALUES ($1, $2)`, [key, c]);
      });
      // A provider that honours idempotency keys: one charge per key, however often it is called.
      const charge = await op.call('charge', async ({ key: derived }) => {
        const keys = this.providerKeys.get(key) ?? new Set<string>();
        keys.add(derived);
        this.providerKeys.set(key, keys);
        return `ch_${derived.slice(-12)}`;
      });
      await op.step('ledger', async (tx) => {
        await tx.query(`INSERT INTO "${this.schema}".ledger (key, charge) VALUES ($1, $2)`, [key, charge]);
      });
      return { key, charge };
    });
  }

  /** Read after the faults, from the new primary. */
  async verify(db: pg.Pool): Promise<Verdict> {
    const { rows: requests } = await db.query<{ key: string; state: string; operation: string }>(
      `SELECT idempotency_key AS key, state, operation FROM "${this.schema}".requests WHERE tenant_id = $1`,
      [this.tenant],
    );
    const keys = requests.map((r) => r.key);
    const count = async (table: string) => {
      const { rows } = await db.query<{ key: string; n: number }>(
        `SELECT key, count(*)::int AS n FROM "${this.schema}".${table} WHERE key = ANY($1) GROUP BY key`,
        [[...new Set([...keys, ...this.acked.keys()])]],
      );
      return new Map(rows.map((r) => [r.key, r.n]));
    };
    const orders = await count('orders');
    const ledger = await count('ledger');
    const state = new Map(requests.map((r) => [r.key, r.state]));
    const duplicates = [
      ...[...orders].filter(([, n]) => n > 1).map(([k, n]) => `orders ${k} ×${n}`),
      ...[...ledger].filter(([, n]) => n > 1).map(([k, n]) => `ledger ${k} ×${n}`),
    ];
    const lost: string[] = [];
    for (const [key, kind] of this.acked) {
      if (orders.get(key) !== 1) lost.push(`${kind} ${key}: no order`);
      if (kind === 'steps' && ledger.get(key) !== 1) lost.push(`${kind} ${key}: no ledger entry`);
      if (state.get(key) !== 'completed')
        lost.push(`${kind} ${key}: idem record ${state.get(key) ?? 'missing'}`);
    }
    const stuck = requests
      .filter((r) => r.state !== 'completed')
      .map((r) => `${r.operation} ${r.key}: ${r.state}`);
    const providerKeysPerIntent = [...this.providerKeys]
      .filter(([, derived]) => derived.size !== 1)
      .map(([key, derived]) => `${key}: ${[...derived].join(', ')}`);
    return { duplicates, lost, stuck, providerKeysPerIntent };
  }

  /** The longest stretch without an acknowledged write from the fault on: the outage clients saw. */
  outage(): { gapMs: number; fromMs: number; toMs: number } {
    const times = [this.faultAt, ...this.ackTimes.filter((t) => t >= this.faultAt).sort((a, b) => a - b)];
    let best = { gapMs: 0, fromMs: 0, toMs: 0 };
    for (let i = 1; i < times.length; i++) {
      const gap = times[i]! - times[i - 1]!;
      if (gap > best.gapMs) {
        best = { gapMs: gap, fromMs: times[i - 1]! - this.faultAt, toMs: times[i]! - this.faultAt };
      }
    }
    return best;
  }

  summary(
    driver: string,
    fault: string,
    report: FaultReport,
    verdict: Verdict,
    idleErrors: number,
    driverCrashes: number,
  ): string {
    const kinds = [...this.acked.values()];
    const outage = this.outage();
    const top = [...this.failures]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 6)
      .map(([reason, n]) => `${n}× ${reason}`)
      .join('; ');
    const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
    return (
      `[ha] ${driver}, ${fault} (${report.from} -> ${report.to}): ${this.started} intents ` +
      `(${kinds.filter((k) => k === 'run').length} run, ${kinds.filter((k) => k === 'steps').length} steps acknowledged), ` +
      `${verdict.duplicates.length} duplicates, ${verdict.lost.length} lost, ${verdict.stuck.length} stuck, ` +
      `${this.gaveUp.length} gave up, ${this.nonRetryable.length} non-retryable, ${this.hung.length} hung; ` +
      `outage (no acknowledged write) ${s(outage.gapMs)} from +${s(outage.fromMs)} to +${s(outage.toMs)} after the fault; ` +
      `longest intent ${s(this.longestIntentMs)}; formation writable after ${s(report.writableAfterMs)}, ` +
      `healthy after ${s(report.healthyAfterMs)}; ${this.retries} retries, ` +
      `${this.failures.get(describeError(new AttemptTimeout())) ?? 0} attempt timeouts, ` +
      `${this.neverSettled.length} abandoned calls never settled, ${idleErrors} idle-connection errors, ` +
      `${driverCrashes} driver crashes (uncaught)` +
      (top ? `; failures seen: ${top}` : '')
    );
  }
}

/** An error as one short line: idem's code, then the driver's SQLSTATE or code and message. */
function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const parts: string[] = [];
  let e: unknown = error;
  for (let depth = 0; depth < 4 && e instanceof Error; depth++) {
    const code = (e as { code?: unknown }).code;
    const state = sqlStateOf(e);
    const label = isIdemError(e) ? e.code : (state ?? (typeof code === 'string' ? code : e.name));
    parts.push(depth === 0 && isIdemError(e) ? label : `${label} ${e.message.slice(0, 80)}`);
    e = (e as { cause?: unknown }).cause;
  }
  return parts.join(' <- ');
}

function compareVersions(a: string, b: string): number {
  const pa = a.split(/[.-]/).map(Number);
  const pb = b.split(/[.-]/).map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
