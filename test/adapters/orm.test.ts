/**
 * Prisma, TypeORM and Knex: idem inside each ORM's own transaction API, with business writes made
 * through the ORM's own API (models, repositories, the query builder), on the real PostgreSQL.
 * The core contract suite (test/operations, test/outbox) runs on these adapters too, through
 * test/support/adapters.ts; this file covers what only an ORM can get wrong.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  createIdem,
  type Idem,
  isIdemError,
  isRetryable,
  SqlState,
  sqlStateOf,
  type Transaction,
} from 'idem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPrisma } from 'idem/prisma';
import { fromTypeORMTransaction } from 'idem/typeorm';
import { recordings } from '../support/recordings.js';
import { prepareAdapter, type AdapterFactory, type AdapterUnderTest } from '../support/adapters.js';
import { countRows, databaseUrl } from '../support/database.js';
import { ormEntities } from '../support/orm-entities.js';
import { knexFactory, mikroOrmFactory, prismaFactory, typeormFactory } from '../support/orm-adapters.js';

/** One ORM: its factory and the business writes made through its own API. */
interface Orm<Client> {
  factory: AdapterFactory<Client>;
  insertEffect(client: Client, intent: string): Promise<number>;
  countEffects(client: Client, intent: string): Promise<number>;
  addToBalance(client: Client, account: number, amount: number): Promise<void>;
  balances(client: Client): Promise<number[]>;
}

const orm = <Client>(o: Orm<Client>) => o as unknown as Orm<unknown>;

const orms: Orm<unknown>[] = [
  orm({
    factory: prismaFactory,
    insertEffect: async (client, intent) =>
      (await client.effect.create({ data: { tenant: 'acme', intent } })).id,
    countEffects: (client, intent) => client.effect.count({ where: { intent } }),
    addToBalance: async (client, id, amount) => {
      await client.account.update({ where: { id }, data: { balance: { increment: amount } } });
    },
    balances: async (client) =>
      (await client.account.findMany({ orderBy: { id: 'asc' } })).map((a) => a.balance),
  }),
  orm({
    factory: typeormFactory,
    insertEffect: async (client, intent) => {
      const result = await client
        .getRepository(ormEntities.typeorm.Effect)
        .insert({ tenant: 'acme', intent });
      return (result.identifiers[0] as { id: number }).id;
    },
    countEffects: (client, intent) => client.getRepository(ormEntities.typeorm.Effect).countBy({ intent }),
    addToBalance: async (client, id, amount) => {
      await client.getRepository(ormEntities.typeorm.Account).increment({ id }, 'balance', amount);
    },
    balances: async (client) =>
      (await client.getRepository(ormEntities.typeorm.Account).find({ order: { id: 'ASC' } })).map(
        (a) => a.balance,
      ),
  }),
  orm({
    factory: knexFactory,
    insertEffect: async (client, intent) => {
      const [row] = await client<{ id: number; tenant: string; intent: string }>('effects')
        .insert({ tenant: 'acme', intent })
        .returning('id');
      return row!.id;
    },
    countEffects: async (client, intent) => {
      const [row] = await client('effects').where({ intent }).count({ n: '*' });
      return Number(row!.n);
    },
    addToBalance: async (client, id, amount) => {
      await client('accounts').where({ id }).increment('balance', amount);
    },
    balances: async (client) =>
      (await client<{ balance: number }>('accounts').orderBy('id').select('balance')).map((a) => a.balance),
  }),
];

describe.each(orms)('$factory.name', (o) => {
  const schema = `idem_orm_${o.factory.name.replace(/\W/g, '')}_${randomBytes(3).toString('hex')}`;
  let adapter: AdapterUnderTest;
  let idem: Idem;
  const newKey = () => `orm-${randomBytes(5).toString('hex')}`;
  /** Read outside any transaction, through the adapter's own connection source. */
  const balances = async () =>
    (
      await adapter.sql.query<{ balance: number }>(`SELECT balance FROM "${schema}".accounts ORDER BY id`)
    ).rows.map((r) => r.balance);
  const effects = (intent: string) =>
    countRows(adapter.sql, `SELECT count(*)::int AS n FROM "${schema}".effects WHERE intent = $1`, [intent]);

  beforeAll(async () => {
    adapter = await prepareAdapter(o.factory, schema);
    await adapter.sql.query(`CREATE TABLE "${schema}".accounts (id int PRIMARY KEY, balance int NOT NULL)`);
    await adapter.sql.query(`INSERT INTO "${schema}".accounts VALUES (1, 0), (2, 0)`);
    idem = createIdem({ sql: adapter.sql, schema, waitMs: 10_000 });
  });
  afterAll(() => adapter?.close());

  it("inside the ORM's own transaction: a throw after runIn rolls back row and key; a commit stores both; the retry replays", async () => {
    const key = newKey();
    const spec = { tenant: 'acme', operation: 'orm-own-tx', key, request: { amount: 5 } };
    let runs = 0;
    const handler = async (tx: Transaction) => {
      runs++;
      return { id: await o.insertEffect(tx.client, key) };
    };

    const aborted = await adapter
      .userTransaction(async (tx) => {
        await idem.runIn(tx, spec, handler);
        expect(await o.countEffects(tx.client, key)).toBe(1); // visible inside the transaction
        throw new Error('the caller aborts after idem');
      })
      .catch((e: unknown) => e);
    expect((aborted as Error).message).toBe('the caller aborts after idem');
    expect(await effects(key)).toBe(0);
    expect(await idem.get(spec)).toBeNull();

    const first = await adapter.userTransaction((tx) => idem.runIn(tx, spec, handler));
    expect(first.replayed).toBe(false);
    expect(await effects(key)).toBe(1);
    expect((await idem.get(spec))?.state).toBe('completed');

    const again = await adapter.userTransaction((tx) => idem.runIn(tx, spec, handler));
    expect(again).toMatchObject({ replayed: true, value: first.value });
    expect(runs).toBe(2); // the aborted run and the committed one; never the replay
    expect(await effects(key)).toBe(1);
  });

  it.each(recordings)(
    '20 concurrent idem.run calls with one key, recorded at %s, make exactly one business row',
    async (recording) => {
      const key = newKey();
      const spec = { tenant: 'acme', operation: 'orm-burst', key, request: { n: 1 }, recording };
      let runs = 0;
      const results = await Promise.all(
        Array.from({ length: 20 }, () =>
          idem.run(spec, async (tx) => {
            runs++;
            await sleep(50); // hold the claim while the duplicates arrive
            return o.insertEffect(tx.client, key);
          }),
        ),
      );
      // Claim-first: the duplicates wait before their handlers; at commit they run theirs and roll back.
      if (recording === 'claim') expect(runs).toBe(1);
      else expect(runs).toBeGreaterThanOrEqual(1);
      expect(await effects(key)).toBe(1);
      expect(new Set(results.map((r) => r.value)).size).toBe(1);
      expect(results.filter((r) => !r.replayed)).toHaveLength(1);
    },
  );

  it('a deadlock between two ORM transactions reaches idem as 40P01 and the victim is retried', async () => {
    const suffix = randomBytes(3).toString('hex');
    const before = await balances();
    let attempts = 0;
    let arrived = 0;
    let bothLocked!: () => void;
    const barrier = new Promise<void>((resolve) => (bothLocked = resolve));
    const transfer = (from: number, to: number) =>
      idem.run({ tenant: 'acme', operation: 'transfer', key: `dl-${from}-${suffix}` }, async (tx) => {
        attempts++;
        await o.addToBalance(tx.client, from, -1);
        if (++arrived === 2) bothLocked();
        await Promise.race([barrier, sleep(2000)]);
        await o.addToBalance(tx.client, to, 1);
        return 'moved';
      });
    const results = await Promise.all([transfer(1, 2), transfer(2, 1)]);
    expect(results.map((r) => r.value)).toEqual(['moved', 'moved']);
    expect(attempts).toBe(3); // two first attempts and one retried victim
    expect(await balances()).toEqual(before);
  });

  it('a serialization failure (40001) between two ORM transactions is retried by idem', async () => {
    // Every connection of this second adapter runs SERIALIZABLE: two transactions that read both
    // accounts and each write one are write skew, and one of them fails, at its write or at COMMIT.
    const url = new URL(databaseUrl());
    url.searchParams.set('options', '-c default_transaction_isolation=serializable');
    const serializable = await o.factory.create(schema, url.toString());
    try {
      const strict = createIdem({ sql: serializable.sql, schema, transactionRetries: 3 });
      const suffix = randomBytes(3).toString('hex');
      const before = await balances();
      let attempts = 0;
      let arrived = 0;
      let bothRead!: () => void;
      const barrier = new Promise<void>((resolve) => (bothRead = resolve));
      const skew = (account: number) =>
        strict.run({ tenant: 'acme', operation: 'skew', key: `ser-${account}-${suffix}` }, async (tx) => {
          attempts++;
          await o.balances(tx.client);
          if (++arrived === 2) bothRead();
          await Promise.race([barrier, sleep(2000)]);
          await o.addToBalance(tx.client, account, 10);
          return account;
        });
      const results = await Promise.all([skew(1), skew(2)]);
      expect(results.map((r) => r.value)).toEqual([1, 2]);
      expect(attempts).toBeGreaterThanOrEqual(3);
      const after = await balances();
      expect(after).toEqual([before[0]! + 10, before[1]! + 10]);
    } finally {
      await serializable.close({ keepSchema: true });
    }
  });

  it('idem.steps records each step in its own ORM transaction and resumes after a failure', async () => {
    const key = newKey();
    const spec = { tenant: 'acme', operation: 'orm-steps', key, request: { amount: 3 } };
    const ran: string[] = [];
    let failBetween = true;
    const body = async (op: Parameters<Parameters<Idem['steps']>[1]>[0]) => {
      const reserved = await op.step('reserve', async (tx) => {
        ran.push('reserve');
        return o.insertEffect(tx.client, `${key}:reserve`);
      });
      if (failBetween) {
        failBetween = false;
        throw Object.assign(new Error('provider unreachable'), { code: 'ECONNRESET' });
      }
      const charged = await op.step('charge', async (tx) => {
        ran.push('charge');
        return o.insertEffect(tx.client, `${key}:charge`);
      });
      return { reserved, charged, resumed: op.resumed };
    };
    await expect(idem.steps(spec, body)).rejects.toThrow();
    const done = await idem.steps(spec, body);
    expect(done.value.resumed).toBe(true);
    expect(ran).toEqual(['reserve', 'charge']);
    expect(await effects(`${key}:reserve`)).toBe(1);
    expect(await effects(`${key}:charge`)).toBe(1);
    expect((await idem.steps(spec, body)).replayed).toBe(true);
  });
});

describe.each([prismaFactory, typeormFactory, knexFactory] as AdapterFactory[])(
  'statements through $name',
  (factory) => {
    const schema = `idem_stmt_${factory.name.replace(/\W/g, '')}_${randomBytes(3).toString('hex')}`;
    let adapter: AdapterUnderTest;
    const s = `"${schema}"`;

    beforeAll(async () => {
      adapter = await prepareAdapter(factory, schema);
    });
    afterAll(() => adapter?.close());

    it('counts rows of INSERT … RETURNING, UPDATE, SELECT and DELETE, in and out of a transaction', async () => {
      for (const where of ['outside', 'inside'] as const) {
        const tag = `rc-${where}-${randomBytes(3).toString('hex')}`;
        const counts = async (tx: Pick<Transaction, 'query'>) => {
          const inserted = await tx.query(
            `INSERT INTO ${s}.effects (tenant, intent) SELECT 'acme', $1 FROM generate_series(1, 3) RETURNING id`,
            [tag],
          );
          const updated = await tx.query(`UPDATE ${s}.effects SET payload = '{}'::jsonb WHERE intent = $1`, [
            tag,
          ]);
          const selected = await tx.query(`SELECT id FROM ${s}.effects WHERE intent = $1`, [tag]);
          const viaCte = await tx.query<{ n: number }>(
            `WITH touched AS (UPDATE ${s}.effects SET payload = NULL WHERE intent = $1 RETURNING id) SELECT count(*)::int AS n FROM touched`,
            [tag],
          );
          const cteWrite = await tx.query(
            `WITH picked AS (SELECT id FROM ${s}.effects WHERE intent = $1) UPDATE ${s}.effects SET tenant = 'acme' WHERE id IN (SELECT id FROM picked)`,
            [tag],
          );
          const deleted = await tx.query(`DELETE FROM ${s}.effects WHERE intent = $1`, [tag]);
          return {
            inserted: [inserted.rowCount, inserted.rows.length],
            updated: [updated.rowCount, updated.rows.length],
            selected: [selected.rowCount, selected.rows.length],
            viaCte: [viaCte.rowCount, Number(viaCte.rows[0]!.n)],
            cteWrite: cteWrite.rowCount,
            deleted: deleted.rowCount,
          };
        };
        const result =
          where === 'outside' ? await counts(adapter.sql) : await adapter.sql.transaction(counts);
        expect(result, where).toEqual({
          inserted: [3, 3],
          updated: [3, 0],
          selected: [3, 3],
          viaCte: [1, 3],
          cteWrite: 3,
          deleted: 3,
        });
      }
    });

    it('round-trips int8, jsonb and bytea exactly', async () => {
      const big = '9007199254740993'; // 2^53 + 1: a double would read 9007199254740992
      const doc = { amount: 10.5, note: 'é 🎉 "quoted"', nested: { list: [1, null, true] } };
      const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      const { rows } = await adapter.sql.query<{ big: unknown; doc: unknown; bytes: Uint8Array }>(
        'SELECT $1::int8 AS big, $2::text::jsonb AS doc, $3::bytea AS bytes',
        [big, JSON.stringify(doc), bytes],
      );
      expect(String(rows[0]!.big)).toBe(big);
      expect(rows[0]!.doc).toEqual(doc);
      expect(Buffer.from(rows[0]!.bytes).equals(bytes)).toBe(true);
    });

    it('maps $n by number, binds a reused $1 twice, and leaves literal ? and $ alone', async () => {
      const { rows } = await adapter.sql.query<Record<string, unknown>>(
        `SELECT $2::text AS second, $1::text AS first, $1::text || '-' || $2::text AS both,
                '{"a": 1}'::jsonb ? 'a' AS has_key, '{"a": 1}'::jsonb ?| ARRAY['x', 'a'] AS has_any,
                'what? $1 -- not a comment' AS literal, $$dollar $2 ?$$ AS dollar /* $1 ? */`,
        ['one', 'two'],
      );
      expect(rows[0]).toEqual({
        second: 'two',
        first: 'one',
        both: 'one-two',
        has_key: true,
        has_any: true,
        literal: 'what? $1 -- not a comment',
        dollar: 'dollar $2 ?',
      });
    });
  },
);

describe('Prisma specifics', () => {
  const schema = `idem_prisma_${randomBytes(3).toString('hex')}`;
  let adapter: AdapterUnderTest;

  beforeAll(async () => {
    adapter = await prepareAdapter(prismaFactory, schema);
  });
  afterAll(() => adapter?.close());

  it('surfaces the SQLSTATE inside P2010 errors and failed COMMITs', async () => {
    const duplicate = await adapter.sql
      .query(`INSERT INTO "${schema}".effects (id, tenant, intent) VALUES (1, 'a', 'b'), (1, 'a', 'b')`)
      .catch((e: unknown) => e);
    expect((duplicate as { code: string }).code).toBe('P2010');
    expect(sqlStateOf(duplicate)).toBe(SqlState.uniqueViolation);

    // A deferred constraint fails at COMMIT: Prisma throws a DriverAdapterError without a `code`.
    await adapter.sql.query(`CREATE TABLE "${schema}".deferred (v int UNIQUE DEFERRABLE INITIALLY DEFERRED)`);
    const atCommit = await adapter.sql
      .transaction((tx) => tx.query(`INSERT INTO "${schema}".deferred VALUES (1), (1)`))
      .catch((e: unknown) => e);
    expect((atCommit as { code?: unknown }).code).toBeUndefined();
    expect(sqlStateOf(atCommit)).toBe(SqlState.uniqueViolation);
  });

  it("a handler that runs 6 s completes: idem's transactions are not cut at Prisma's 5 s default", async () => {
    const idem = createIdem({ sql: adapter.sql, schema });
    const key = `slow-${randomBytes(4).toString('hex')}`;
    const result = await idem.run({ tenant: 'acme', operation: 'slow', key }, async (tx) => {
      await sleep(6000);
      await tx.query(`INSERT INTO "${schema}".effects (tenant, intent) VALUES ('acme', $1)`, [key]);
      return 'done';
    });
    expect(result.value).toBe('done');
    expect((await idem.get({ tenant: 'acme', operation: 'slow', key }))?.state).toBe('completed');
  });

  it("with Prisma's own 5 s timeout the same handler fails and stores nothing", async () => {
    const second = await prismaFactory.create(schema);
    try {
      const short = createIdem({ sql: fromPrisma(second.root, { transaction: { timeout: 5000 } }), schema });
      const key = `cut-${randomBytes(4).toString('hex')}`;
      const error = await short
        .run({ tenant: 'acme', operation: 'slow', key }, async (tx) => {
          await sleep(5500);
          return tx.query('SELECT 1 AS one');
        })
        .catch((e: unknown) => e);
      expect(String(error)).toMatch(/expired transaction|timeout/i);
      // Rolled back, nothing committed: the caller may retry (Prisma's P2028 carries no SQLSTATE).
      expect(isRetryable(error)).toBe(true);
      expect(await short.get({ tenant: 'acme', operation: 'slow', key })).toBeNull();
    } finally {
      await second.close({ keepSchema: true });
    }
  });
});

describe('Prisma transient errors', () => {
  it('a database that cannot be reached is a retryable failure, not a permanent one', async () => {
    const schema = `idem_prisma_down_${randomBytes(3).toString('hex')}`;
    const down = await prismaFactory.create(schema, 'postgres://postgres@127.0.0.1:1/test');
    try {
      const idem = createIdem({ sql: down.sql, schema, transactionRetries: 0 });
      const error = await idem
        .run({ tenant: 'acme', operation: 'down', key: 'k' }, async () => 'never')
        .catch((e: unknown) => e);
      expect(isRetryable(error)).toBe(true);
    } finally {
      await down.close({ keepSchema: true }).catch(() => undefined);
    }
  });
});

describe('TypeORM specifics', () => {
  it('refuses an EntityManager outside a transaction: idem would write apart from the caller', async () => {
    const schema = `idem_typeorm_${randomBytes(3).toString('hex')}`;
    const adapter = await typeormFactory.create(schema);
    try {
      const error = (() => {
        try {
          return fromTypeORMTransaction(adapter.root.manager);
        } catch (e) {
          return e;
        }
      })();
      expect(isIdemError(error) && error.code).toBe('IDEM_INVALID_ARGUMENT');
    } finally {
      await adapter.close();
    }
  });
});

describe('MikroORM through idem/knex', () => {
  const schema = `idem_mikro_${randomBytes(3).toString('hex')}`;
  let adapter: Awaited<ReturnType<typeof mikroOrmFactory.create>>;
  let idem: Idem;
  const count = (intent: string) =>
    countRows(adapter.sql, `SELECT count(*)::int AS n FROM "${schema}".effects WHERE intent = $1`, [intent]);

  beforeAll(async () => {
    adapter = (await prepareAdapter(mikroOrmFactory, schema)) as typeof adapter;
    idem = createIdem({ sql: adapter.sql, schema });
  });
  afterAll(() => adapter?.close());

  it("idem.run's transaction is joined by em.transactional({ ctx }): the flush commits or rolls back with the key", async () => {
    const { Effect } = ormEntities.mikroOrm;
    const write = (tx: Transaction, intent: string) =>
      adapter.root.em.fork().transactional(
        async (em) => {
          em.create(Effect, { tenant: 'acme', intent, payload: null });
          await em.flush();
        },
        { ctx: tx.client },
      );
    const failed = `mikro-${randomBytes(4).toString('hex')}`;
    await expect(
      idem.run({ tenant: 'acme', operation: 'mikro', key: failed }, async (tx) => {
        await write(tx, failed);
        throw new Error('after the flush');
      }),
    ).rejects.toThrow();
    expect(await count(failed)).toBe(0);

    const key = `mikro-${randomBytes(4).toString('hex')}`;
    const spec = { tenant: 'acme', operation: 'mikro', key };
    await idem.run(spec, async (tx) => write(tx, key));
    expect((await idem.run(spec, async (tx) => write(tx, key))).replayed).toBe(true);
    expect(await count(key)).toBe(1);
  });
});
