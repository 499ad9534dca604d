/**
 * The one classification of failures (src/core/failures.ts): its table holds for every SQLSTATE,
 * however an ORM wraps it, and the errors real drivers raise against a real PostgreSQL (and a
 * server that never answers) land where a retry of the same key expects them.
 */
import { createServer, type Server, type Socket } from 'node:net';
import fc from 'fast-check';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  classifyFailure,
  CommitOutcomeUnknownError,
  databaseFailureRules,
  driverFailureRules,
  isRetryable,
  OperationFailedError,
} from 'idem';
import { databaseFailureRule, isDatabaseOutage } from '../../src/core/failures.js';
import { databaseUrl } from '../support/database.js';

const sqlStateChar = fc.constantFrom(...'0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ'.split(''));
/** Any code of PostgreSQL's classes: a digit first, or F0, HV, P0, XX. */
const sqlState = fc
  .tuple(
    fc.oneof(
      fc.tuple(fc.constantFrom(...'0123456789'.split('')), sqlStateChar).map(([a, b]) => a + b),
      fc.constantFrom('F0', 'HV', 'P0', 'XX'),
    ),
    fc.array(sqlStateChar, { minLength: 3, maxLength: 3 }),
  )
  .map(([cls, rest]) => cls + rest.join(''));

/** What the table says of a SQLSTATE: its exact rule, else its class's, else permanent. */
function expected(state: string) {
  return databaseFailureRule(state)?.kind ?? 'permanent';
}

/** The shapes a SQLSTATE reaches idem in: the driver's own, and the wrappers of the ORMs. */
const wrappers: Record<string, (state: string) => unknown> = {
  'node-postgres / postgres.js (code)': (code) => Object.assign(new Error('db'), { code }),
  'Drizzle (cause)': (code) =>
    Object.assign(new Error('Failed query'), { cause: Object.assign(new Error('db'), { code }) }),
  'Prisma driver adapter (meta.driverAdapterError.cause.originalCode)': (code) =>
    Object.assign(new Error('Raw query failed'), {
      code: 'P2010',
      meta: { driverAdapterError: { cause: { originalCode: code, kind: 'postgres' } } },
    }),
  'TypeORM (QueryFailedError copies code)': (code) =>
    Object.assign(new Error('QueryFailedError'), { code, driverError: { code } }),
  'an idem OperationFailedError around it': (code) =>
    new OperationFailedError(Object.assign(new Error('db'), { code }), isRetryable({ code })),
};

describe('the classification table', () => {
  it('names each rule once, with a SQLSTATE or a class', () => {
    const matches = databaseFailureRules.map((r) => r.match);
    expect(new Set(matches).size).toBe(matches.length);
    for (const match of matches) expect(match).toMatch(/^([0-9A-Z]{2}|[0-9A-Z]{5})$/);
  });

  it('covers what a failover, a full server and a partition produce', () => {
    const cases: [string, string][] = [
      ['08000', 'transient'],
      ['08006', 'transient'],
      ['08001', 'transient'],
      ['08007', 'unknown-outcome'],
      ['53300', 'transient'],
      ['53200', 'transient'],
      ['57P01', 'transient'],
      ['57P02', 'transient'],
      ['57P03', 'transient'],
      ['25006', 'transient'],
      ['25P03', 'transient'],
      ['40001', 'transient'],
      ['40P01', 'transient'],
      ['40003', 'unknown-outcome'],
      ['55P03', 'transient'],
      ['57014', 'transient'],
      ['23505', 'permanent'],
      ['22P02', 'permanent'],
      ['42P01', 'permanent'],
      ['P0001', 'permanent'],
      ['40002', 'permanent'],
      ['57P04', 'permanent'],
    ];
    for (const [state, kind] of cases) {
      expect([state, classifyFailure({ code: state }).kind]).toEqual([state, kind]);
    }
  });

  it('every SQLSTATE, in every wrapper, classifies as the table says (property)', () => {
    fc.assert(
      fc.property(sqlState, fc.constantFrom(...Object.keys(wrappers)), (state, wrapper) => {
        const error = wrappers[wrapper]!(state);
        expect(classifyFailure(error).kind).toBe(expected(state));
        expect(isRetryable(error)).toBe(expected(state) !== 'permanent');
      }),
      { numRuns: 2000 },
    );
  });

  it("an error's own retryable flag wins, but never hides an unknown COMMIT outcome (property)", () => {
    fc.assert(
      fc.property(sqlState, fc.boolean(), (state, retryable) => {
        const kind = classifyFailure(Object.assign(new Error('x'), { code: state, retryable })).kind;
        if (expected(state) === 'unknown-outcome') expect(kind).toBe('unknown-outcome');
        else expect(kind).toBe(retryable ? 'transient' : 'permanent');
      }),
    );
  });

  it('deep cause chains are followed, and a cycle ends', () => {
    let error: unknown = Object.assign(new Error('innermost'), { code: 'ECONNRESET' });
    for (let i = 0; i < 6; i++) error = new Error(`layer ${i}`, { cause: error });
    expect(classifyFailure(error).kind).toBe('transient');
    const cyclic = new Error('cycle') as Error & { cause?: unknown };
    cyclic.cause = cyclic;
    expect(classifyFailure(cyclic).kind).toBe('permanent');
    expect(classifyFailure(undefined).kind).toBe('permanent');
    expect(classifyFailure('a string').kind).toBe('permanent');
  });

  it("every driver rule is what its driver's error gives", () => {
    for (const rule of driverFailureRules) {
      const error = Object.assign(new Error(rule.message?.replace('…', 'rowDescription message') ?? 'x'), {
        ...(rule.code ? { code: rule.code } : {}),
        ...(rule.name ? { name: rule.name } : {}),
      });
      expect([rule.driver, rule.code ?? rule.name ?? rule.message, classifyFailure(error).kind]).toEqual([
        rule.driver,
        rule.code ?? rule.name ?? rule.message,
        rule.kind,
      ]);
    }
    expect(classifyFailure(new Error('card declined')).kind).toBe('permanent');
    expect(classifyFailure(new CommitOutcomeUnknownError(new Error('Connection terminated'))).kind).toBe(
      'unknown-outcome',
    );
  });

  it('an outage is a link or availability failure, not a conflict or a bug', () => {
    expect(isDatabaseOutage({ code: '53300' })).toBe(true);
    expect(isDatabaseOutage({ code: '57P01' })).toBe(true);
    expect(isDatabaseOutage({ code: '25006' })).toBe(true);
    expect(isDatabaseOutage(new Error('timeout exceeded when trying to connect'))).toBe(true);
    expect(isDatabaseOutage({ code: '40001' })).toBe(false);
    expect(isDatabaseOutage({ code: '23505' })).toBe(false);
    expect(isDatabaseOutage(new Error('boom'))).toBe(false);
  });
});

describe('real drivers against a real PostgreSQL', () => {
  let silent: Server;
  let silentPort = 0;
  const held: Socket[] = [];

  beforeAll(async () => {
    // Accepts connections and never answers: a failover's unanswered window, a partition.
    silent = createServer((socket) => void held.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    silentPort = (silent.address() as { port: number }).port;
  });
  afterAll(async () => {
    for (const socket of held) socket.destroy();
    await new Promise<void>((resolve) => silent.close(() => resolve()));
  });

  const failure = async (work: () => Promise<unknown>) => {
    try {
      await work();
    } catch (error) {
      return classifyFailure(error);
    }
    throw new Error('expected a failure');
  };

  it('node-postgres: read-only, statement timeout, serialization, checkout and read timeouts, refusal', async () => {
    const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1, connectionTimeoutMillis: 200 });
    try {
      // 25006: what a connection that landed on a standby or a demoted primary gets.
      expect(
        await failure(() =>
          pool.query(`BEGIN READ ONLY; CREATE TEMP TABLE t_${process.pid}_ro (x int); COMMIT`),
        ),
      ).toMatchObject({ kind: 'transient', discardConnection: true });
      await pool.query('ROLLBACK').catch(() => undefined);
      expect(await failure(() => pool.query(`SET statement_timeout = 50; SELECT pg_sleep(1)`))).toMatchObject(
        {
          kind: 'transient',
          timedOut: true,
        },
      );
      await pool.query('RESET statement_timeout');
      expect(await failure(() => pool.query(`SELECT 1/0`))).toMatchObject({ kind: 'permanent' });
      expect(await failure(() => pool.query(`SELECT 'x'::int`))).toMatchObject({ kind: 'permanent' });

      // The pool's only connection held: the checkout times out.
      const holder = await pool.connect();
      try {
        expect(await failure(() => pool.query('SELECT 1'))).toMatchObject({
          kind: 'transient',
          timedOut: true,
        });
      } finally {
        holder.release();
      }
      expect(
        await failure(() => pool.query({ text: 'SELECT pg_sleep(1)', query_timeout: 50 } as pg.QueryConfig)),
      ).toMatchObject({
        kind: 'transient',
        discardConnection: true,
        timedOut: true,
      });
    } finally {
      await pool.end();
    }
    const refused = new pg.Client({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 500 });
    expect(await failure(() => refused.connect())).toMatchObject({ kind: 'transient' });
    const unanswered = new pg.Client({ host: '127.0.0.1', port: silentPort, connectionTimeoutMillis: 200 });
    expect(await failure(() => unanswered.connect())).toMatchObject({ kind: 'transient', timedOut: true });
  });

  it('node-postgres: a terminated backend (57P01) and a lost connection', async () => {
    const client = new pg.Client({ connectionString: databaseUrl() });
    await client.connect();
    client.on('error', () => undefined);
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const admin = new pg.Client({ connectionString: databaseUrl() });
    await admin.connect();
    try {
      const pending = failure(() => client.query('SELECT pg_sleep(5)'));
      await new Promise((r) => setTimeout(r, 100));
      await admin.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
      expect(await pending).toMatchObject({ kind: 'transient', discardConnection: true });
      expect(await failure(() => client.query('SELECT 1'))).toMatchObject({ kind: 'transient' });
    } finally {
      await admin.end();
      await client.end().catch(() => undefined);
    }
  });

  it('postgres.js: connect timeout, refusal, a cancelled statement', async () => {
    const unanswered = postgres({ host: '127.0.0.1', port: silentPort, connect_timeout: 0.2, max: 1 });
    expect(await failure(() => unanswered`SELECT 1`)).toMatchObject({ kind: 'transient', timedOut: true });
    await unanswered.end({ timeout: 0 });
    const refused = postgres({ host: '127.0.0.1', port: 1, max: 1, connect_timeout: 1 });
    expect(await failure(() => refused`SELECT 1`)).toMatchObject({ kind: 'transient' });
    await refused.end({ timeout: 0 });
    const sql = postgres(databaseUrl(), { max: 1 });
    try {
      expect(
        await failure(() =>
          sql.begin(async (tx) => tx.unsafe(`SET LOCAL statement_timeout = 50; SELECT pg_sleep(1)`)),
        ),
      ).toMatchObject({ kind: 'transient', timedOut: true });
      expect(await failure(() => sql`SELECT 1/0`)).toMatchObject({ kind: 'permanent' });
    } finally {
      await sql.end();
    }
  });
});

describe('docs/operations/reliability.md', () => {
  it('prints every rule of the classification, as the code has it', async () => {
    const { readFileSync } = await import('node:fs');
    // Table cells as prettier pads them, unpadded.
    const doc = readFileSync(
      new URL('../../docs/operations/reliability.md', import.meta.url),
      'utf8',
    ).replace(/ +/g, ' ');
    for (const rule of databaseFailureRules) {
      expect(doc).toContain(
        `| \`${rule.match}\`${rule.match.length === 2 ? ' (class)' : ''} | ${rule.kind} |`,
      );
    }
    for (const rule of driverFailureRules) {
      const what = rule.code
        ? `code \`${rule.code}\``
        : rule.name
          ? `name \`${rule.name}\``
          : `"${rule.message}"`;
      expect(doc).toContain(`| ${rule.driver} | ${what} | ${rule.kind} |`);
    }
  });
});
