/**
 * `core/errors.ts` promises that every error idem raises is an `IdemError` with a stable code, and
 * that keyed operations wrap every other failure. This checks it: every error class a public entry
 * point exports is an `IdemError`, errors thrown through public calls carry their documented code
 * and pass their brand guard, and `run` / `steps` against a database that does not answer throw
 * `OperationFailedError`, not the driver's error.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import * as root from 'idem';
import { IdemError, isIdemError } from 'idem';
import * as claimsApi from 'idem/claims';
import * as clientApi from 'idem/client';
import * as httpApi from 'idem/http';
import * as inboxApi from 'idem/inbox';
import * as outboxApi from 'idem/outbox';
import * as webhooksApi from 'idem/webhooks';
import * as workflowApi from 'idem/workflow';
import { toMillis } from '../../src/core/clock.js';
import { fromPg } from 'idem/pg';

const entryPoints = {
  idem: root,
  'idem/claims': claimsApi,
  'idem/client': clientApi,
  'idem/http': httpApi,
  'idem/inbox': inboxApi,
  'idem/outbox': outboxApi,
  'idem/webhooks': webhooksApi,
  'idem/workflow': workflowApi,
};

/** A pool that must never be reached: every call below is refused before any statement. */
const unreachable = fromPg({
  query: () => Promise.reject(new Error('no statement should run')),
  connect: () => Promise.reject(new Error('no connection should be taken')),
});

describe('public errors', () => {
  it('every error class exported by a public entry point is an IdemError', () => {
    const errorClasses: string[] = [];
    for (const [entry, exports] of Object.entries(entryPoints)) {
      for (const [name, value] of Object.entries(exports as Record<string, unknown>)) {
        if (typeof value !== 'function' || !((value.prototype as unknown) instanceof Error)) continue;
        errorClasses.push(`${entry}:${name}`);
        const isIdemClass = value === IdemError || (value.prototype as unknown) instanceof IdemError;
        expect(isIdemClass, `${entry} exports ${name}, not an IdemError`).toBe(true);
      }
    }
    expect(errorClasses.length).toBeGreaterThan(15);
  });

  it('errors thrown through public calls carry a stable code and pass their brand guard', async () => {
    const claims = claimsApi.createClaims({ sql: unreachable });
    const sagas = workflowApi.createSagas({ sql: unreachable });
    const saga = workflowApi.defineSaga({
      name: 'noop',
      steps: [workflowApi.step({ name: 'a', action: async () => null })],
    });
    const cases: [string, () => unknown, string][] = [
      [
        'a malformed key',
        () => claims.enqueue({ tenant: 'acme', queue: 'q', key: '', payload: {} }),
        'IDEM_INVALID_KEY',
      ],
      [
        'a bad option',
        () => claimsApi.createClaims({ sql: unreachable, leaseMs: -1 }),
        'IDEM_INVALID_ARGUMENT',
      ],
      ['a bad saga key', () => sagas.run(saga, { tenant: 'acme', key: '', input: null }), 'IDEM_INVALID_KEY'],
      [
        'an unknown saga',
        () => sagas.resume({ tenant: 'acme', saga: 'nope', key: 'k' }),
        'IDEM_INVALID_ARGUMENT',
      ],
      [
        'malformed JSON',
        () => httpApi.parseBody(Buffer.from('{'), 'application/json'),
        'IDEM_BODY_MALFORMED',
      ],
      ['a driver value that is no timestamp', () => toMillis({}), 'IDEM_INVALID_ARGUMENT'],
    ];
    for (const [what, call, code] of cases) {
      let thrown: unknown;
      try {
        await call();
      } catch (error) {
        thrown = error;
      }
      expect(isIdemError(thrown), `${what}: ${String(thrown)}`).toBe(true);
      expect((thrown as IdemError).code, what).toBe(code);
      expect((thrown as IdemError).code).toMatch(/^IDEM_[A-Z_]+$/);
    }
    const tooLarge = await httpApi
      .readWebBody(new Response('x'.repeat(100)).body, 10)
      .catch((error: unknown) => error);
    expect(httpApi.isBodyTooLarge(tooLarge)).toBe(true);
    expect((tooLarge as IdemError).code).toBe('IDEM_BODY_TOO_LARGE');
  });
});

describe('keyed operations against a database that does not answer', () => {
  // Nothing listens on port 1: every connection is refused, before or inside a transaction.
  const down = () => new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', max: 1 });
  const spec = { tenant: 'acme', operation: 'pay', key: 'k-1', request: {} };

  for (const readFirst of [true, false] as const) {
    it(`idem.run (readFirst: ${readFirst}) throws a retryable OperationFailedError with the driver's error as cause`, async () => {
      const pool = down();
      try {
        const idem = root.createIdem({ sql: fromPg(pool), transactionRetries: 0 });
        const thrown = await idem.run({ ...spec, readFirst }, async () => 'never').catch((e: unknown) => e);
        expect(root.isOperationFailed(thrown), String(thrown)).toBe(true);
        expect(thrown).toMatchObject({ code: 'IDEM_OPERATION_FAILED', retryable: true });
        expect((thrown as Error).cause).toMatchObject({ code: 'ECONNREFUSED' });
      } finally {
        await pool.end();
      }
    });
  }

  it('idem.steps throws the same, not the driver error', async () => {
    const pool = down();
    try {
      const idem = root.createIdem({ sql: fromPg(pool) });
      const thrown = await idem.steps(spec, async () => 'never').catch((e: unknown) => e);
      expect(thrown).toMatchObject({ code: 'IDEM_OPERATION_FAILED', retryable: true });
      expect((thrown as Error).cause).toMatchObject({ code: 'ECONNREFUSED' });
    } finally {
      await pool.end();
    }
  });
});
