/**
 * The Idempotency-Key contract, the same assertions on Express, Fastify, Hono and node:http:
 * real servers on 127.0.0.1, a real HTTP client (undici), a real PostgreSQL.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deriveKey } from 'idem';
import { problemKinds } from 'idem/http';
import { frameworks, type RunningApp } from '../support/http/apps.js';
import { fixedJson, fixedText } from '../support/http/business.js';
import { client, type Send, type Sent } from '../support/http/client.js';
import { createHarness, until, type Harness } from '../support/http/harness.js';
import { recordings } from '../support/recordings.js';

const problemType = (kind: keyof typeof problemKinds) => `urn:idem:problem:${kind}`;

function expectProblem(response: Sent, kind: keyof typeof problemKinds) {
  expect(response.status).toBe(problemKinds[kind].status);
  expect(response.header('content-type')).toBe('application/problem+json');
  const problem = response.json<{ type: string; code: string; status: number }>();
  expect(problem.type).toBe(problemType(kind));
  expect(problem.code).toBe(problemKinds[kind].code);
  expect(problem.status).toBe(problemKinds[kind].status);
  return problem;
}

const cases = recordings.flatMap((recording) => frameworks.map((framework) => ({ recording, framework })));

describe.each(cases)(
  'Idempotency-Key contract, recorded at $recording, on $framework.name',
  ({ recording, framework }) => {
    let h: Harness;
    let app: RunningApp;
    let send: Send;
    const newKey = () => `k-${framework.name}-${randomBytes(6).toString('hex')}`;
    const count = async (table: string, key: string) =>
      Number(
        (
          await h.db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM "${h.schema}".${table} WHERE key = $1`,
            [key],
          )
        ).rows[0]!.n,
      );
    const inspect = (operation: string, key: string, tenant = 'acme') =>
      h.idem.get({ tenant, operation, key });

    beforeAll(async () => {
      h = await createHarness({ recording });
      app = await framework.start(h);
      send = client(app.url);
    });
    afterAll(async () => {
      await app?.close();
      await h?.close();
    });

    it('answers the first request, then replays status, allowed headers and the same bytes; one effect', async () => {
      const key = newKey();
      const first = await send('/orders', { key, body: { amount: 40, note: 'first' } });
      expect(first.status).toBe(201);
      expect(first.replayed).toBe(false);
      expect(first.header('set-cookie')).toBeDefined();
      expect(first.header('x-trace')).toBeDefined();
      const order = first.json<{ id: number }>();
      expect(first.header('location')).toBe(`/orders/${order.id}`);

      const again = await send('/orders', { key, body: { amount: 40, note: 'first' } });
      expect(again.status).toBe(201);
      expect(again.replayed).toBe(true);
      expect(again.bytes.equals(first.bytes)).toBe(true);
      expect(again.header('content-type')).toBe(first.header('content-type'));
      expect(again.header('location')).toBe(first.header('location'));
      // Never replayed: the first client's cookies, per-response tracing; Date is the replay's own.
      expect(again.header('set-cookie')).toBeUndefined();
      expect(again.header('x-trace')).toBeUndefined();
      expect(again.header('date')).toBeDefined();
      expect(h.runs.get(`acme:${key}`)).toBe(1);
      expect(await count('orders', key)).toBe(1);
      const row = await inspect('POST /orders', key);
      expect(row?.state).toBe('completed');
      expect(Buffer.from(row!.body!).equals(first.bytes)).toBe(true);
    });

    it('lost response: the server commits, the client is cut off, the retry gets the stored bytes; one effect', async () => {
      const key = newKey();
      const gate = `lost-${key}`;
      const abort = new AbortController();
      const attempt = send('/orders', {
        key,
        body: { amount: 7 },
        headers: { 'x-test-gate': gate },
        signal: abort.signal,
      });
      await h.gates.reached(gate); // the handler is inside its transaction
      abort.abort(); // the connection is cut before any response
      await expect(attempt).rejects.toThrow();
      h.gates.open(gate); // the handler answers to a closed connection; the commit still happens
      await until(async () => (await inspect('POST /orders', key))?.state === 'completed', 'the commit');

      const retry = await send('/orders', { key, body: { amount: 7 } });
      expect(retry.status).toBe(201);
      expect(retry.replayed).toBe(true);
      const stored = await inspect('POST /orders', key);
      expect(retry.bytes.equals(Buffer.from(stored!.body!))).toBe(true);
      const again = await send('/orders', { key, body: { amount: 7 } });
      expect(again.bytes.equals(retry.bytes)).toBe(true);
      const { rows } = await h.db.pool.query<{ id: number }>(
        `SELECT id FROM "${h.schema}".orders WHERE key = $1`,
        [key],
      );
      expect(rows).toHaveLength(1);
      expect(retry.json<{ id: number }>().id).toBe(rows[0]!.id);
      expect(h.runs.get(`acme:${key}`)).toBe(1);
    });

    it('100 concurrent identical requests make one effect and get 100 identical bodies', async () => {
      const key = newKey();
      const gate = `burst-${key}`;
      const before = h.arrivals.count;
      const all = Array.from({ length: 100 }, () =>
        send('/orders', { key, body: { amount: 100 }, headers: { 'x-test-gate': gate } }),
      );
      // The first execution holds its transaction open until all 100 requests reached the server.
      await until(() => h.arrivals.count >= before + 100, '100 arrivals');
      await h.gates.reached(gate);
      h.gates.open(gate);
      const responses = await Promise.all(all);
      expect(responses.map((r) => r.status)).toEqual(Array(100).fill(201));
      const bodies = new Set(responses.map((r) => r.bytes.toString('base64')));
      expect(bodies.size).toBe(1);
      expect(responses.filter((r) => r.replayed)).toHaveLength(99);
      // Claim-first runs the handler once; at commit the duplicates run theirs and roll back.
      if (recording === 'claim') expect(h.runs.get(`acme:${key}`)).toBe(1);
      else expect(h.runs.get(`acme:${key}`)).toBeGreaterThanOrEqual(1);
      expect(await count('orders', key)).toBe(1);
    });

    it.runIf(recording === 'claim')(
      'in flight: waits up to the bound, then 409 with Retry-After; afterwards replays',
      async () => {
        const key = newKey();
        const gate = `inflight-${key}`;
        const first = send('/inflight', { key, body: { amount: 3 }, headers: { 'x-test-gate': gate } });
        await h.gates.reached(gate);
        const started = Date.now();
        const concurrent = await send('/inflight', { key, body: { amount: 3 } });
        const waited = Date.now() - started;
        const problem = expectProblem(concurrent, 'in-progress');
        expect(Number(concurrent.header('retry-after'))).toBeGreaterThanOrEqual(1);
        expect(problem).toMatchObject({ retryable: true });
        expect(waited).toBeGreaterThanOrEqual(250); // waitMs 300 on this route
        // No upper bound on the clock: the holder is released only after this answer, so an answer at all
        // shows the wait gave up at its bound rather than waiting for the holder.
        h.gates.open(gate);
        expect((await first).status).toBe(201);
        const after = await send('/inflight', { key, body: { amount: 3 } });
        expect(after.replayed).toBe(true);
        expect(after.bytes.equals((await first).bytes)).toBe(true);
        expect(await count('orders', key)).toBe(1);
      },
    );

    it.runIf(recording === 'commit')(
      'in flight: the request that commits first is stored; the earlier one rolls back and sends it, replayed',
      async () => {
        const key = newKey();
        const gate = `inflight-${key}`;
        const first = send('/inflight', { key, body: { amount: 3 }, headers: { 'x-test-gate': gate } });
        await h.gates.reached(gate); // the first has written its order and waits before its record
        const concurrent = await send('/inflight', { key, body: { amount: 3 } });
        expect(concurrent.status).toBe(201);
        expect(concurrent.replayed).toBe(false);
        h.gates.open(gate);
        const earlier = await first;
        expect(earlier.status).toBe(201);
        expect(earlier.replayed).toBe(true);
        expect(earlier.bytes.equals(concurrent.bytes)).toBe(true);
        expect(await count('orders', key)).toBe(1);
      },
    );

    it.runIf(recording === 'commit')(
      'in flight with another body: whichever commits first keeps the key; the other rolls back and answers 422',
      async () => {
        const key = newKey();
        const gate = `inflight-other-${key}`;
        const first = send('/inflight', { key, body: { amount: 3 }, headers: { 'x-test-gate': gate } });
        await h.gates.reached(gate);
        const other = await send('/inflight', { key, body: { amount: 4 } });
        expect(other.status).toBe(201); // it commits first: the key is its own now
        h.gates.open(gate);
        expectProblem(await first, 'key-reused');
        expect(await count('orders', key)).toBe(1);
      },
    );

    it('same key, different payload: 422; whitespace, key order and excluded fields do not count', async () => {
      const key = newKey();
      const first = await send('/orders', { key, body: '{"amount":10,"note":"n","clientTime":"10:00"}' });
      expect(first.status).toBe(201);
      const reordered = await send('/orders', {
        key,
        body: '{ "note" : "n",\n   "clientTime": "10:05", "amount": 10.0 }',
      });
      expect(reordered.status).toBe(201);
      expect(reordered.replayed).toBe(true);
      expect(reordered.bytes.equals(first.bytes)).toBe(true);
      const changed = await send('/orders', { key, body: { amount: 11, note: 'n' } });
      expectProblem(changed, 'key-reused');
      expect(await count('orders', key)).toBe(1);
    });

    it('names the operation after the route pattern; the path is part of the fingerprint', async () => {
      const created = (await send('/orders', { key: newKey(), body: { amount: 1 } })).json<{ id: number }>();
      const key = newKey();
      const patched = await send(`/orders/${created.id}`, {
        method: 'PATCH',
        key,
        body: { note: 'patched' },
      });
      expect(patched.status).toBe(200);
      expect(await inspect('PATCH /orders/:id', key)).not.toBeNull();
      const other = await send(`/orders/${created.id + 1000}`, {
        method: 'PATCH',
        key,
        body: { note: 'patched' },
      });
      expectProblem(other, 'key-reused');
    });

    it('400: missing, malformed, too long, two header fields (one empty too), a list; quoted and bare forms are one key', async () => {
      expectProblem(await send('/orders', { body: { amount: 1 } }), 'key-missing');
      for (const raw of ['"unterminated', '"bad\\escape"', 'has space', '"a";', 'a"b']) {
        expectProblem(await send('/orders', { rawKey: raw, body: { amount: 1 } }), 'key-malformed');
      }
      expectProblem(await send('/orders', { key: 'x'.repeat(256), body: { amount: 1 } }), 'key-too-long');
      expectProblem(
        await send('/orders', { rawKey: ['"one"', '"two"'], body: { amount: 1 } }),
        'key-multiple',
      );
      expectProblem(await send('/orders', { rawKey: '"one", "two"', body: { amount: 1 } }), 'key-multiple');
      // An empty second (or first) line is a second field: a proxy keeping the last one would see no key.
      expectProblem(await send('/orders', { rawKey: ['"one"', ''], body: { amount: 1 } }), 'key-multiple');
      expectProblem(await send('/orders', { rawKey: ['', '"two"'], body: { amount: 1 } }), 'key-multiple');
      expect(
        (
          await h.db.pool.query(
            `SELECT 1 FROM "${h.schema}".requests WHERE idempotency_key IN ('one', 'two')`,
          )
        ).rowCount,
      ).toBe(0);

      const key = newKey();
      const quoted = await send('/orders', { rawKey: `"${key}";client=1`, body: { amount: 2 } });
      expect(quoted.status).toBe(201);
      const bare = await send('/orders', { rawKey: key, body: { amount: 2 } });
      expect(bare.replayed).toBe(true);
      expect(await count('orders', key)).toBe(1);
      expectProblem(
        await send('/orders', { key: newKey(), tenant: null, body: { amount: 1 } }),
        'tenant-missing',
      );
      const badJson = newKey();
      expectProblem(await send('/orders', { key: badJson, body: '{"amount": 1,' }), 'body-malformed');
      expect(await inspect('POST /orders', badJson)).toBeNull();
    });

    it('413 before anything is stored, with and without a declared length', async () => {
      for (const chunked of [false, true]) {
        const key = newKey();
        const big = { amount: 1, note: 'x'.repeat(20 * 1024) };
        expectProblem(await send('/orders', { key, body: big, chunked }), 'body-too-large');
        expect(await inspect('POST /orders', key)).toBeNull();
        expect(await count('orders', key)).toBe(0);
        expect(h.runs.get(`acme:${key}`)).toBeUndefined();
      }
    });

    it('a retryable failure stores nothing; the retry runs afresh and succeeds', async () => {
      const key = newKey();
      const failed = await send('/flaky', { key, body: {} });
      expect(failed.status).toBeGreaterThanOrEqual(500);
      expect(failed.replayed).toBe(false);
      expect(await inspect('POST /flaky', key)).toBeNull();
      expect(await count('flaky', key)).toBe(0); // the row it wrote was rolled back
      const retry = await send('/flaky', { key, body: {} });
      expect(retry.status).toBe(201);
      expect(retry.replayed).toBe(false);
      expect(retry.json()).toEqual({ ok: true, run: 2 });
      expect(await count('flaky', key)).toBe(1);
      const replay = await send('/flaky', { key, body: {} });
      expect(replay.replayed).toBe(true);
      expect(h.runs.get(`acme:${key}`)).toBe(2);
    });

    it('a declined payment (402) is stored with its writes and replayed like a success', async () => {
      const key = newKey();
      const declined = await send('/payments', { key, body: { card: 'declined', amount: 50 } });
      expect(declined.status).toBe(402);
      expect(declined.json()).toMatchObject({ error: 'card_declined' });
      const retry = await send('/payments', { key, body: { card: 'declined', amount: 50 } });
      expect(retry.status).toBe(402);
      expect(retry.replayed).toBe(true);
      expect(retry.bytes.equals(declined.bytes)).toBe(true);
      expect(await count('payments', key)).toBe(1);
      expect((await inspect('POST /payments', key))?.state).toBe('failed');
    });

    it("tenant B with tenant A's key runs independently and never sees A's response", async () => {
      const key = newKey();
      const a = await send('/orders', { key, tenant: 'tenant-a', body: { amount: 5 } });
      const b = await send('/orders', { key, tenant: 'tenant-b', body: { amount: 5 } });
      expect(a.status).toBe(201);
      expect(b.status).toBe(201);
      expect(b.replayed).toBe(false);
      expect(b.json()).toMatchObject({ tenant: 'tenant-b' });
      expect(b.json<{ id: number }>().id).not.toBe(a.json<{ id: number }>().id);
      const aAgain = await send('/orders', { key, tenant: 'tenant-a', body: { amount: 5 } });
      const bAgain = await send('/orders', { key, tenant: 'tenant-b', body: { amount: 5 } });
      expect(aAgain.bytes.equals(a.bytes)).toBe(true);
      expect(bAgain.bytes.equals(b.bytes)).toBe(true);
      // B with another payload is judged against B's own record, not A's.
      expectProblem(await send('/orders', { key, tenant: 'tenant-b', body: { amount: 6 } }), 'key-reused');
      expect(await count('orders', key)).toBe(2);
    });

    it('commit failure: 503 retryable problem, nothing stored, no handler headers; the retry runs afresh', async () => {
      const key = newKey();
      await h.db.pool.query(`UPDATE "${h.schema}".commit_switch SET fail = true`);
      try {
        const failed = await send('/fragile', { key, body: {} });
        const problem = expectProblem(failed, 'commit-failed');
        expect(problem).toMatchObject({ retryable: true });
        expect(failed.header('retry-after')).toBe('1');
        expect(failed.header('set-cookie')).toBeUndefined();
        expect(await inspect('POST /fragile', key)).toBeNull();
        expect(await count('fragile', key)).toBe(0);
        expect(app.errors.some((e) => String((e as Error).message).includes('refused at commit'))).toBe(true);
      } finally {
        await h.db.pool.query(`UPDATE "${h.schema}".commit_switch SET fail = false`);
      }
      const retry = await send('/fragile', { key, body: {} });
      expect(retry.status).toBe(201);
      expect(retry.replayed).toBe(false);
      expect(await count('fragile', key)).toBe(1);
    });

    it.each([
      ['json', 201, 'application/json'],
      ['text', 200, 'text/plain; charset=utf-8'],
      ['binary', 200, 'application/octet-stream'],
    ] as const)('replays a %s body byte for byte', async (kind, status, contentType) => {
      const key = newKey();
      const first = await send(`/bytes/${kind}`, { key, body: {} });
      expect(first.status).toBe(status);
      expect(first.header('content-type')?.startsWith(contentType)).toBe(true);
      if (kind === 'json') expect(first.bytes.equals(Buffer.from(fixedJson))).toBe(true);
      if (kind === 'text') expect(first.bytes.equals(Buffer.from(fixedText))).toBe(true);
      if (kind === 'binary') {
        expect(first.bytes.length).toBe(256 + 4096);
        expect([...first.bytes.subarray(0, 256)]).toEqual(Array.from({ length: 256 }, (_, i) => i));
      }
      const replay = await send(`/bytes/${kind}`, { key, body: {} });
      expect(replay.replayed).toBe(true);
      expect(replay.status).toBe(status);
      expect(replay.header('content-type')).toBe(first.header('content-type'));
      expect(replay.bytes.equals(first.bytes)).toBe(true);
      expect(await count('blobs', key)).toBe(1);
    });

    it('accepts text and binary request bodies and fingerprints their bytes', async () => {
      const key = newKey();
      const bytes = randomBytes(64);
      const first = await send('/bytes/text', { key, body: bytes, contentType: 'application/octet-stream' });
      expect(first.status).toBe(200);
      const same = await send('/bytes/text', {
        key,
        body: Buffer.from(bytes),
        contentType: 'application/octet-stream',
      });
      expect(same.replayed).toBe(true);
      const flipped = Buffer.from(bytes);
      flipped[0] = flipped[0]! ^ 1;
      expectProblem(
        await send('/bytes/text', { key, body: flipped, contentType: 'application/octet-stream' }),
        'key-reused',
      );
      const textKey = newKey();
      expect(
        (await send('/bytes/json', { key: textKey, body: 'plain words', contentType: 'text/plain' })).status,
      ).toBe(201);
      expectProblem(
        await send('/bytes/json', { key: textKey, body: 'plain words!', contentType: 'text/plain' }),
        'key-reused',
      );
    });

    it('past retention: 409 result-expired with the resource pointer; past the tombstone the key is new', async () => {
      const key = newKey();
      const first = await send('/ephemeral', { key, body: { amount: 9 } });
      expect(first.status).toBe(201);
      h.clock.advance(61_000); // result kept 60 s
      const expired = await send('/ephemeral', { key, body: { amount: 9 } });
      const problem = expectProblem(expired, 'result-expired');
      expect(problem).toMatchObject({
        resource: { type: 'location', id: first.header('location') },
        retryable: false,
      });
      expect(expired.header('retry-after')).toBeUndefined();
      expect(h.runs.get(`acme:${key}`)).toBe(1);
      h.clock.advance(60_000); // tombstone kept 120 s
      const fresh = await send('/ephemeral', { key, body: { amount: 9 } });
      expect(fresh.status).toBe(201);
      expect(fresh.replayed).toBe(false);
      expect(await count('orders', key)).toBe(2);
    });

    it('steps: a retryable failure between steps; the retry resumes, skips the first step, same derived key', async () => {
      const key = newKey();
      h.provider.dropResponseOnce('/charge'); // the provider charges, then the connection drops
      const failed = await send('/checkout', { key, body: { amount: 25 } });
      expect(failed.status).toBeGreaterThanOrEqual(500);
      const pending = await inspect('POST /checkout', key);
      expect(pending?.state).toBe('pending');
      // The operator sees where it stopped: during the charge call, whose outcome is unknown.
      expect(pending?.recoveryPoint).toBe('call:charge');

      const retry = await send('/checkout', { key, body: { amount: 25 } });
      expect(retry.status).toBe(201);
      const done = retry.json<{ reservation: unknown; charge: unknown; resumed: boolean }>();
      expect(typeof done.reservation).toBe('string');
      expect(typeof done.charge).toBe('string');
      expect(done.resumed).toBe(true);
      const scope = { tenant: 'acme', operation: 'POST /checkout', key };
      const calls = h.provider.calls.filter(
        (c) => c.key === deriveKey(scope, 'reserve') || c.key === deriveKey(scope, 'charge'),
      );
      expect(calls.filter((c) => c.path === '/reserve')).toHaveLength(1); // not repeated
      const charges = calls.filter((c) => c.path === '/charge');
      expect(charges).toHaveLength(2); // the dropped call and the resumed one...
      expect(new Set(charges.map((c) => c.key))).toEqual(new Set([deriveKey(scope, 'charge')])); // ...with one key
      expect(h.provider.effects.get('/charge')?.has(deriveKey(scope, 'charge'))).toBe(true);
      expect(await count('payments', key)).toBe(1);
      const replay = await send('/checkout', { key, body: { amount: 25 } });
      expect(replay.replayed).toBe(true);
      expect(replay.bytes.equals(retry.bytes)).toBe(true);
    });

    it('steps: a request that dies between steps is taken over by the retry once its lease lapses', async () => {
      const key = newKey();
      const gate = `crash-${key}`;
      const abort = new AbortController();
      const doomed = send('/checkout', {
        key,
        body: { amount: 30 },
        headers: { 'x-test-gate': gate },
        signal: abort.signal,
      });
      await h.gates.reached(gate); // 'reserve' is recorded; the holder now stalls like a dead process
      abort.abort();
      await expect(doomed).rejects.toThrow();

      const early = await send('/checkout', { key, body: { amount: 30 } });
      expectProblem(early, 'in-progress'); // the lease is still held
      h.clock.advance(31_000); // lease 30 s
      const retry = await send('/checkout', { key, body: { amount: 30 } });
      expect(retry.status).toBe(201);
      expect(retry.json()).toMatchObject({ resumed: true });

      h.gates.open(gate); // the stalled holder wakes up: its next step is fenced off
      const scope = { tenant: 'acme', operation: 'POST /checkout', key };
      await until(() => (h.runs.get(`acme:${key}`) ?? 0) >= 2, 'both runs');
      await new Promise((resolve) => setTimeout(resolve, 100));
      const calls = h.provider.calls.filter(
        (c) => c.key === deriveKey(scope, 'reserve') || c.key === deriveKey(scope, 'charge'),
      );
      expect(calls.filter((c) => c.path === '/reserve')).toHaveLength(1);
      expect(calls.filter((c) => c.path === '/charge')).toHaveLength(1);
      expect(await count('payments', key)).toBe(1);
      expect((await send('/checkout', { key, body: { amount: 30 } })).bytes.equals(retry.bytes)).toBe(true);
    });

    it('leaves uncovered methods alone and runs an optional-key route without idempotency', async () => {
      const health = await send('/health', { method: 'GET', tenant: null });
      expect(health.status).toBe(200);
      expect(health.bytes.toString()).toBe('ok');
      const withoutKey = await send('/optional', { body: {} });
      expect(withoutKey.status).toBe(200);
      expect(withoutKey.json()).toEqual({ idem: false });
      const withKey = await send('/optional', { key: newKey(), body: {} });
      expect(withKey.json()).toEqual({ idem: true });
    });
  },
);
