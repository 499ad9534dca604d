/**
 * The environment settings for poolers: `IDEM_PREPARE` (demo and CLI) and `DATABASE_DIRECT_URL`
 * (demo). A typo must be refused, never silently read as the default; the CLI's connection must
 * honour `IDEM_PREPARE` through a real PgBouncer.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { openDatabase } from '../../src/cli/database.js';
import { createIdem, isIdemError, migrate } from 'idem';
import { readConfig } from '../../demo/config.js';
import { databaseUrl } from '../support/database.js';
import { requirePgBouncer, startPgBouncer, type PgBouncer } from '../support/pgbouncer.js';

describe('pooler settings from the environment', () => {
  it('reads IDEM_PREPARE and DATABASE_DIRECT_URL for the demo, with safe defaults', () => {
    expect(readConfig({})).toMatchObject({ prepare: true, directUrl: undefined });
    for (const off of ['false', 'FALSE', 'off', 'no', '0', ' false ']) {
      expect(readConfig({ IDEM_PREPARE: off }).prepare).toBe(false);
    }
    for (const on of ['true', 'on', 'yes', '1', ''])
      expect(readConfig({ IDEM_PREPARE: on }).prepare).toBe(true);
    expect(readConfig({ DATABASE_DIRECT_URL: 'postgres://db:5432/app' }).directUrl).toBe(
      'postgres://db:5432/app',
    );
  });

  it('refuses a value that is neither true nor false, naming the setting', async () => {
    const refusal = (() => {
      try {
        readConfig({ IDEM_PREPARE: 'flase' });
      } catch (error) {
        return error;
      }
    })();
    expect(isIdemError(refusal) && refusal.code).toBe('IDEM_INVALID_ARGUMENT');
    expect((refusal as Error).message).toBe('IDEM_PREPARE must be true or false, not "flase"');
    vi.stubEnv('IDEM_PREPARE', 'nope');
    try {
      await expect(openDatabase()).rejects.toThrow('IDEM_PREPARE must be true or false, not "nope"');
    } finally {
      vi.unstubAllEnvs();
    }
  });
});

const binary = requirePgBouncer();

describe.skipIf(!binary)('the CLI’s connection behind PgBouncer in transaction mode', () => {
  let bouncer: PgBouncer;
  const schema = `idem_pcli_${randomBytes(3).toString('hex')}`;

  beforeAll(async () => {
    bouncer = await startPgBouncer(binary!, { targetUrl: databaseUrl(), poolSize: 2 });
  });
  afterAll(() => bouncer?.stop());
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
  });

  async function burst(): Promise<string[]> {
    const warnings: string[] = [];
    vi.spyOn(console, 'warn').mockImplementation((...args: unknown[]) => void warnings.push(args.join(' ')));
    vi.stubEnv('DATABASE_URL', bouncer.url);
    const db = await openDatabase({ poolSize: 8 });
    try {
      await migrate(db.sql, { schema });
      const idem = createIdem({ sql: db.sql, schema });
      const tag = randomBytes(3).toString('hex');
      await Promise.allSettled(
        Array.from({ length: 64 }, (_, i) =>
          idem.run({ tenant: 'acme', operation: 'op', key: `${tag}-${i}`, request: {} }, async () => i),
        ),
      );
      return warnings;
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await db.close();
    }
  }

  it('with IDEM_PREPARE=false sends nothing named: no refusal', async () => {
    vi.stubEnv('IDEM_PREPARE', 'false');
    expect(await burst()).toEqual([]);
  });

  it('without it, the pooler refuses named statements and the warning names the setting', async () => {
    const warnings = await burst();
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('IDEM_PREPARE=false');
  });
});
