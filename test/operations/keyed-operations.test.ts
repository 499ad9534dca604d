import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import {
  isExpired,
  isInvalidKey,
  isKeyReused,
  isOperationFailed,
  type OperationFailedError,
} from '../../src/core/errors.js';
import type { Queryable } from '../../src/core/sql.js';
import { createIdem, type Idem } from '../../src/operations/idem.js';
import { completed, refused } from '../../src/operations/outcome.js';
import { adapterFactories, prepareAdapter, type AdapterUnderTest } from '../support/adapters.js';
import { recordings } from '../support/recordings.js';

const day = 86_400_000;

describe.each(recordings.flatMap((recording) => adapterFactories.map((factory) => ({ recording, factory }))))(
  'keyed operations recorded at $recording on $factory.name',
  ({ recording, factory }) => {
    const schema = `idem_ko_${recording}_${factory.name.replace(/\W/g, '')}_${randomBytes(3).toString('hex')}`;
    let adapter: AdapterUnderTest;
    let clock: ManualClock;
    let idem: Idem;
    let intentCounter = 0;

    beforeAll(async () => {
      adapter = await prepareAdapter(factory, schema);
      clock = new ManualClock(Date.now());
      idem = createIdem({
        sql: adapter.sql,
        schema,
        clock,
        retention: { resultMs: 1 * day, tombstoneMs: 3 * day },
        recording,
      });
    });
    afterAll(() => adapter.close());

    const newKey = () => `key-${++intentCounter}-${randomBytes(4).toString('hex')}`;

    async function insertEffect(tx: Queryable, intent: string, payload: unknown = null): Promise<number> {
      const { rows } = await tx.query<{ id: number }>(
        `INSERT INTO "${schema}".effects (tenant, intent, payload) VALUES ('acme', $1, $2) RETURNING id`,
        [intent, JSON.stringify(payload)],
      );
      return rows[0]!.id;
    }

    async function effectCount(intent: string): Promise<number> {
      const { rows } = await adapter.sql.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".effects WHERE intent = $1`,
        [intent],
      );
      return Number(rows[0]!.n);
    }

    it('passes an array as one parameter (redrive and list statements take text[])', async () => {
      const { rows } = await adapter.sql.query<{ picked: number }>(
        `SELECT count(*)::int AS picked FROM unnest(ARRAY['a', 'b', 'c']) AS v WHERE v = ANY($1::text[]) AND $2::int = 7`,
        [['a', 'c'], 7],
      );
      expect(Number(rows[0]!.picked)).toBe(2);
    });

    it('commits the claim, the handler writes and the result together, then replays without running', async () => {
      const key = newKey();
      const spec = { tenant: 'acme', operation: 'create-order', key, request: { amount: 10, items: ['a'] } };
      let runs = 0;
      const handler = async (tx: Queryable) => {
        runs++;
        const id = await insertEffect(tx, key, { amount: 10 });
        return { orderId: id, note: 'créé', amount: 10 };
      };
      const first = await idem.run(spec, handler);
      expect(first.replayed).toBe(false);
      expect(first.state).toBe('completed');
      const second = await idem.run(spec, handler);
      expect(second.replayed).toBe(true);
      expect(second.value).toEqual(first.value);
      expect(runs).toBe(1);
      expect(await effectCount(key)).toBe(1);
      const row = await idem.get({ tenant: 'acme', operation: 'create-order', key });
      expect(row?.state).toBe('completed');
      expect(row?.result).toBe(JSON.stringify(first.value));
    });

    it('leaves nothing when the handler throws, classifies the error, and lets the retry run afresh', async () => {
      const key = newKey();
      const spec = { tenant: 'acme', operation: 'create-order', key, request: { amount: 5 } };
      const transient = Object.assign(new Error('provider timed out'), { code: 'ETIMEDOUT' });
      const failure = await idem
        .run(spec, async (tx) => {
          await insertEffect(tx, key);
          throw transient;
        })
        .catch((e: unknown) => e);
      expect(isOperationFailed(failure)).toBe(true);
      expect((failure as OperationFailedError).retryable).toBe(true);
      expect((failure as OperationFailedError).cause).toBe(transient);
      expect(await effectCount(key)).toBe(0);
      expect(await idem.get({ tenant: 'acme', operation: 'create-order', key })).toBeNull();

      const permanent = await idem
        .run(spec, () => Promise.reject(new TypeError('bug')))
        .catch((e: unknown) => e);
      expect((permanent as OperationFailedError).retryable).toBe(false);

      const retry = await idem.run(spec, async (tx) => ({ id: await insertEffect(tx, key) }));
      expect(retry.replayed).toBe(false);
      expect(await effectCount(key)).toBe(1);
    });

    it('refuses the same key with a different payload and runs nothing', async () => {
      const key = newKey();
      await idem.run({ tenant: 'acme', operation: 'pay', key, request: { amount: 10 } }, async (tx) =>
        insertEffect(tx, key),
      );
      let ran = false;
      const error = await idem
        .run({ tenant: 'acme', operation: 'pay', key, request: { amount: 11 } }, async () => {
          ran = true;
        })
        .catch((e: unknown) => e);
      expect(isKeyReused(error)).toBe(true);
      expect(ran).toBe(false);
      expect(await effectCount(key)).toBe(1);
    });

    it('fingerprints canonically: key order, number spelling and excluded fields do not matter', async () => {
      const key = newKey();
      const first = await idem.run(
        {
          tenant: 'acme',
          operation: 'pay',
          key,
          request: { a: 1, b: { c: 2.5, d: [1, 2] }, sentAt: 'x' },
          fingerprint: { exclude: ['sentAt'] },
        },
        async (tx) => insertEffect(tx, key),
      );
      const again = await idem.run(
        {
          tenant: 'acme',
          operation: 'pay',
          key,
          request: { b: { d: [1.0, 2], c: 25e-1 }, a: 1, sentAt: 'y' },
          fingerprint: { exclude: ['sentAt'] },
        },
        async () => -1,
      );
      expect(again.replayed).toBe(true);
      expect(again.value).toBe(first.value);
    });

    it('stores a business refusal and replays it like a success', async () => {
      const key = newKey();
      const spec = { tenant: 'acme', operation: 'charge', key, request: { customer: 'declined_bob' } };
      let runs = 0;
      const handler = async (tx: Queryable) => {
        runs++;
        await insertEffect(tx, key, { declined: true });
        return refused({ error: 'card_declined' }, { resource: { type: 'payment', id: 'pay_1' } });
      };
      const first = await idem.run(spec, handler);
      const second = await idem.run(spec, handler);
      expect(first).toMatchObject({ state: 'failed', replayed: false, value: { error: 'card_declined' } });
      expect(second).toMatchObject({ state: 'failed', replayed: true, value: { error: 'card_declined' } });
      expect(second.resource).toEqual({ type: 'payment', id: 'pay_1' });
      expect(runs).toBe(1);
      expect(await effectCount(key)).toBe(1);
    });

    it('replays a binary body byte for byte', async () => {
      const key = newKey();
      const bytes = new Uint8Array([0, 255, 1, 128, 10, 13, 0]);
      const spec = { tenant: 'acme', operation: 'blob', key };
      await idem.run(spec, async () => completed({ status: 201 }, { body: bytes }));
      const replay = await idem.run(spec, async () => completed({ status: 500 }));
      expect(replay.replayed).toBe(true);
      expect(Buffer.from(replay.body!).equals(Buffer.from(bytes))).toBe(true);
    });

    it('scopes keys by tenant and operation', async () => {
      const key = newKey();
      const a = await idem.run({ tenant: 'acme', operation: 'pay', key }, async (tx) =>
        insertEffect(tx, key),
      );
      const b = await idem.run({ tenant: 'globex', operation: 'pay', key }, async (tx) =>
        insertEffect(tx, key),
      );
      const c = await idem.run({ tenant: 'acme', operation: 'refund', key }, async (tx) =>
        insertEffect(tx, key),
      );
      expect([a.replayed, b.replayed, c.replayed]).toEqual([false, false, false]);
      expect(new Set([a.value, b.value, c.value]).size).toBe(3);
      expect(await effectCount(key)).toBe(3);
    });

    it('refuses invalid keys with a typed error', async () => {
      for (const key of ['', 'a'.repeat(256), 'has space', 'tab\t', 'naïve', '\u0000']) {
        const error = await idem
          .run({ tenant: 'acme', operation: 'pay', key }, async () => 1)
          .catch((e: unknown) => e);
        expect(isInvalidKey(error), JSON.stringify(key)).toBe(true);
      }
      const strict = createIdem({ sql: adapter.sql, schema, minKeyLength: 16 });
      expect(
        isInvalidKey(
          await strict
            .run({ tenant: 'acme', operation: 'pay', key: 'short' }, async () => 1)
            .catch((e: unknown) => e),
        ),
      ).toBe(true);
      const ok = await idem.run(
        { tenant: 'acme', operation: 'pay', key: 'x'.repeat(255) },
        async () => 'fine',
      );
      expect(ok.value).toBe('fine');
    });

    it('commits inside the caller’s own transaction, and rolls back with it', async () => {
      const key = newKey();
      const spec = { tenant: 'acme', operation: 'user-tx', key, request: { n: 1 } };
      await adapter
        .userTransaction(async (tx) => {
          await idem.runIn(tx, spec, async (inner) => insertEffect(inner, key));
          throw new Error('caller aborts after idem');
        })
        .catch(() => undefined);
      expect(await effectCount(key)).toBe(0);
      expect(await idem.get({ tenant: 'acme', operation: 'user-tx', key })).toBeNull();

      const result = await adapter.userTransaction((tx) =>
        idem.runIn(tx, spec, async (inner) => insertEffect(inner, key)),
      );
      const replay = await adapter.userTransaction((tx) => idem.runIn(tx, spec, async () => -1));
      expect(replay).toMatchObject({ replayed: true, value: result.value });
      expect(await effectCount(key)).toBe(1);
    });

    it('expires: replays within retention, answers "expired" with the resource inside the tombstone, then forgets', async () => {
      const key = newKey();
      const spec = { tenant: 'acme', operation: 'late', key, request: { amount: 1 } };
      let runs = 0;
      const handler = async (tx: Queryable) => {
        runs++;
        const id = await insertEffect(tx, key);
        return completed({ id }, { resource: { type: 'order', id: String(id) } });
      };
      const first = await idem.run(spec, handler);
      clock.advance(day - 1);
      expect((await idem.run(spec, handler)).replayed).toBe(true);

      clock.advance(2); // past resultMs, inside the tombstone
      const expired = await idem.run(spec, handler).catch((e: unknown) => e);
      expect(isExpired(expired)).toBe(true);
      expect((expired as { resource: unknown }).resource).toEqual({
        type: 'order',
        id: String(first.value.id),
      });
      expect(runs).toBe(1);

      // The sweeper clears the stored result but keeps the tombstone; the answer stays the same.
      const swept = await idem.sweep();
      expect(swept.cleared).toBeGreaterThanOrEqual(1);
      expect((await idem.get(spec))?.result).toBeNull();
      expect(isExpired(await idem.run(spec, handler).catch((e: unknown) => e))).toBe(true);
      // A different payload inside the tombstone is still refused as a reused key.
      expect(
        isKeyReused(await idem.run({ ...spec, request: { amount: 2 } }, handler).catch((e: unknown) => e)),
      ).toBe(true);

      clock.advance(2 * day); // past the tombstone: the key is new again
      const fresh = await idem.run(spec, handler);
      expect(fresh.replayed).toBe(false);
      expect(runs).toBe(2);
      expect(await effectCount(key)).toBe(2);
    });

    it('sweeps rows past their tombstone in bounded batches', async () => {
      const sweepClock = new ManualClock(clock.now());
      const local = createIdem({
        sql: adapter.sql,
        schema,
        clock: sweepClock,
        retention: { resultMs: 1000, tombstoneMs: 2000 },
      });
      for (let i = 0; i < 25; i++)
        await local.run({ tenant: 'sweep', operation: 'op', key: `k${i}` }, async () => i);
      sweepClock.advance(10 * 365 * day);
      const result = await local.sweep({ batchSize: 7 });
      expect(result.deleted).toBeGreaterThanOrEqual(25);
      const { rows } = await adapter.sql.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".requests WHERE tenant_id = 'sweep'`,
      );
      expect(Number(rows[0]!.n)).toBe(0);
    });

    it('without the read in front, a retry is answered from the record and adds no effect', async () => {
      const key = newKey();
      const spec = { tenant: 'acme', operation: 'no-read', key, request: { n: 1 }, readFirst: false };
      let runs = 0;
      const handler = async (tx: Queryable) => {
        runs++;
        return insertEffect(tx, key);
      };
      const first = await idem.run(spec, handler);
      const retry = await idem.run(spec, handler);
      expect(retry).toMatchObject({ replayed: true, value: first.value });
      // At commit, the retry's handler ran and its write rolled back; claim-first never ran it.
      expect(runs).toBe(recording === 'commit' ? 2 : 1);
      expect(await effectCount(key)).toBe(1);
      const other = await idem.run({ ...spec, request: { n: 2 } }, handler).catch((e: unknown) => e);
      expect(isKeyReused(other)).toBe(true);
      // A retry whose handler fails on the first one's effect is still answered from the record.
      const failing = await idem.run(spec, async () => {
        throw new Error('order already exists');
      });
      expect(failing).toMatchObject({ replayed: true, value: first.value });
      const inCaller = await adapter.userTransaction((tx) => idem.runIn(tx, spec, handler));
      expect(inCaller).toMatchObject({ replayed: true, value: first.value });
      expect(await effectCount(key)).toBe(1);
    });

    it('inside the caller’s transaction, a taken key undoes only the handler’s writes', async () => {
      const key = newKey();
      const spec = { tenant: 'acme', operation: 'keep-caller', key, readFirst: false };
      const first = await idem.run(spec, async (tx) => insertEffect(tx, key));
      const callerIntent = `${key}-caller`;
      const retry = await adapter.userTransaction(async (tx) => {
        await insertEffect(tx, callerIntent); // the caller's own write, before idem
        const result = await idem.runIn(tx, spec, async (inner) => insertEffect(inner, key));
        await insertEffect(tx, callerIntent); // and after
        return result;
      });
      expect(retry).toMatchObject({ replayed: true, value: first.value });
      expect(await effectCount(key)).toBe(1);
      expect(await effectCount(callerIntent)).toBe(2);
    });
  },
);
