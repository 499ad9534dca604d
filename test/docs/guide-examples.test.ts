/**
 * The guide's "What it guarantees, and what it does not" cannot drift from the code: every page of
 * docs/guide that covers a module has that section, with its guarantees, its limits and an
 * example; every ```ts block of the documentation that names its file on its first line
 * (`// examples/readme/inbox.ts`) is that file as it is (less the file's leading comment), the
 * files compile with `npm run typecheck`, and the examples that can run here run against
 * PostgreSQL. The README's own guarantees link the path-by-path account in docs/operations.
 */
import { readdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createIdem } from 'idem';
import type { OutboxEvent } from 'idem/outbox';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { until } from '../support/poll.js';
import { codeBlocks, documentationFiles, read, root } from '../support/docs/markdown.js';

const examplesDir = 'examples/readme/';
const marker = /^\/\/ (examples\/readme\/[\w-]+\.ts)$/;
const heading = '## What it guarantees, and what it does not';

/** An example file as the documentation shows it: without its leading `//` comment lines. */
function exampleBody(path: string): string {
  const lines = read(path).split('\n');
  let first = 0;
  while (first < lines.length && lines[first]!.startsWith('//')) first++;
  return lines.slice(first).join('\n').trim();
}

/** The section between `title` and the next heading of the same level. */
function section(markdown: string, title: string, where: string): string {
  const level = title.split(' ')[0]!;
  const start = markdown.indexOf(`\n${title}\n`);
  expect(start, `${where}: section "${title}"`).toBeGreaterThanOrEqual(0);
  const rest = markdown.slice(start + title.length + 2);
  const next = rest.search(new RegExp(`^${level} `, 'm'));
  return next < 0 ? rest : rest.slice(0, next);
}

/** The example blocks of one markdown file: `{ file, code }` for each block that names its file. */
const markedBlocksOf = (path: string) =>
  codeBlocks(read(path), path)
    .filter((b) => b.lang === 'ts' && marker.test(b.lines[0] ?? ''))
    .map((b) => ({
      file: marker.exec(b.lines[0]!)![1]!,
      code: b.lines.slice(1).join('\n').trim(),
      doc: path,
    }));
const markedBlocks = documentationFiles().flatMap(markedBlocksOf);

/** Every module the guide must cover, by the page that covers it. */
const modules: Record<string, string> = {
  idem: 'docs/guide/keyed-operations.md',
  'idem.steps': 'docs/guide/multi-step-operations.md',
  'idem/express': 'docs/guide/http.md',
  'idem/inbox': 'docs/guide/inbox.md',
  'idem/outbox': 'docs/guide/outbox.md',
  'idem/webhooks': 'docs/guide/webhooks.md',
  'idem/workflow': 'docs/guide/sagas.md',
  'idem/claims': 'docs/guide/claims.md',
  'idem/client': 'docs/guide/client.md',
};

describe('guide examples', () => {
  it('shows every block marked with its file exactly as the file is', () => {
    expect(markedBlocks.length).toBeGreaterThanOrEqual(9);
    for (const { file, code, doc } of markedBlocks) {
      expect(code, `${doc}'s block for ${file}`).toBe(exampleBody(file));
    }
  });

  it('gives every module its guarantees, its limits and an example', () => {
    for (const [name, page] of Object.entries(modules)) {
      const markdown = read(page);
      const sub = section(markdown, heading, page);
      expect(sub, `${page} (${name})`).toContain('**Guarantees.**');
      expect(sub, `${page} (${name})`).toContain('**Does not.**');
      // An example on the page: a block marked with its file, or a link to one.
      const shown = markedBlocksOf(page).map((b) => b.file);
      const linked = [...markdown.matchAll(/\]\((?:\.\.\/)*(examples\/readme\/[\w-]+\.ts)\)/g)].map(
        (m) => m[1]!,
      );
      const examples = [...shown, ...linked];
      expect(examples, `an example for \`${name}\` in ${page}`).not.toHaveLength(0);
      for (const file of examples) expect(() => read(file)).not.toThrow();
    }
  });

  it('shows every file of examples/readme/ somewhere in the guide', () => {
    const guide = documentationFiles().filter((path) => path.startsWith('docs/guide/'));
    for (const name of readdirSync(new URL(examplesDir, root))) {
      const file = `${examplesDir}${name}`;
      const shown = markedBlocks.some((b) => b.file === file && b.doc.startsWith('docs/guide/'));
      const linked = guide.some((path) => read(path).includes(`/${file})`));
      expect(shown || linked, `${file} in docs/guide`).toBe(true);
    }
  });

  it("links the README's guarantees to the path-by-path account", () => {
    expect(section(read('README.md'), heading, 'README.md')).toContain('](docs/operations/reliability.md)');
  });
});

describe('guide examples against PostgreSQL', () => {
  let db: TestSchema;
  /** A pool whose unqualified names (the examples' business tables) resolve in the test schema. */
  let pool: pg.Pool;
  const servers: Server[] = [];
  const listen = async (server: Server) => {
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  };

  beforeAll(async () => {
    db = await createTestSchema();
    pool = new pg.Pool({ connectionString: databaseUrl(), options: `-c search_path=${db.schema}` });
    await pool.query(`
      CREATE TABLE orders (id text PRIMARY KEY DEFAULT gen_random_uuid()::text, amount int,
                           state text NOT NULL DEFAULT 'new', receipt_sent boolean NOT NULL DEFAULT false);
      CREATE TABLE invoices (id text PRIMARY KEY DEFAULT gen_random_uuid()::text, order_id text,
                             amount int, charge_key text, state text NOT NULL DEFAULT 'open')`);
  });
  afterAll(async () => {
    for (const server of servers) server.closeAllConnections();
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
    await pool?.end();
    await db?.close();
  });

  it('inbox: a redelivered message writes nothing, also when deliveries race', async () => {
    const { billingConsumer } = await import('../../examples/readme/inbox.js');
    const consume = billingConsumer(fromPg(pool), db.schema);
    const first = { id: randomUUID(), orderId: 'o-1', amount: 1250 };
    expect(await consume(first)).toBe('processed');
    expect(await consume(first)).toBe('duplicate');
    const raced = { id: randomUUID(), orderId: 'o-2', amount: 300 };
    const outcomes = await Promise.all(Array.from({ length: 6 }, () => consume(raced)));
    expect(outcomes.filter((o) => o === 'processed')).toHaveLength(1);
    const { rows } = await pool.query<{ order_id: string; charge_key: string }>(
      'SELECT order_id, charge_key FROM invoices ORDER BY order_id',
    );
    expect(rows.map((r) => r.order_id)).toEqual(['o-1', 'o-2']);
    expect(new Set(rows.map((r) => r.charge_key)).size).toBe(2); // one derived key per message
  });

  it('claims: one task per key, enqueued with the order, its side effect sent once with its key', async () => {
    const { receiptQueue } = await import('../../examples/readme/claims.js');
    const queue = receiptQueue(fromPg(pool), db.schema);
    const sql = fromPg(pool);
    const orderId = await sql.transaction(async (tx) => {
      const { rows } = await tx.query<{ id: string }>('INSERT INTO orders (amount) VALUES (10) RETURNING id');
      expect((await queue.enqueue(tx, rows[0]!.id)).created).toBe(true);
      return rows[0]!.id;
    });
    expect((await queue.enqueue(sql, orderId)).created).toBe(false); // a producer's retry
    await expect(
      sql.transaction(async (tx) => {
        await queue.enqueue(tx, 'rolled-back-order');
        throw new Error('the order was not written');
      }),
    ).rejects.toThrow('the order was not written');

    const sent: [string, string][] = [];
    const send = async (id: string, key: string) => void sent.push([id, key]);
    await queue.workOnce(send);
    await queue.workOnce(send);
    expect(sent).toHaveLength(1);
    expect(sent[0]![0]).toBe(orderId);
    const { rows } = await pool.query<{ receipt_sent: boolean }>(
      'SELECT receipt_sent FROM orders WHERE id = $1',
      [orderId],
    );
    expect(rows).toEqual([{ receipt_sent: true }]);
  });

  it('HTTP: a retried POST replays the stored bytes and writes one row; another payload is 422', async () => {
    const { ordersApp } = await import('../../examples/readme/http.js');
    const idem = createIdem({ sql: fromPg(pool), schema: db.schema });
    const url = await listen(createServer(ordersApp(idem)));
    const post = (amount: number) =>
      fetch(`${url}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'k-1', 'x-account': 'acme' },
        body: JSON.stringify({ amount }),
      });
    const first = await post(4242);
    expect(first.status).toBe(201);
    const body = await first.text();
    const retry = await post(4242);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await retry.text()).toBe(body);
    expect(retry.headers.get('location')).toBe(first.headers.get('location'));
    expect((await post(1)).status).toBe(422);
    const { rows } = await pool.query('SELECT id FROM orders WHERE amount = 4242');
    expect(rows).toEqual([{ id: (JSON.parse(body) as { id: string }).id }]);
  });

  it('outbox: the event commits with the update and reaches the publisher', async () => {
    const { orderEvents } = await import('../../examples/readme/outbox.js');
    const { rows } = await pool.query<{ id: string }>('INSERT INTO orders (amount) VALUES (7) RETURNING id');
    const orderId = rows[0]!.id;
    const published: OutboxEvent[] = [];
    const events = orderEvents(fromPg(pool), db.schema);
    await events.markPaid(orderId);
    const dispatcher = await events.startDispatcher({
      publish: async (batch) => {
        published.push(...batch);
        return batch.map((e) => ({ id: e.id, ok: true as const }));
      },
    });
    try {
      await until(
        async () => published.length,
        (n) => n >= 1,
      );
    } finally {
      await dispatcher.stop();
    }
    expect(published.map((e) => [e.type, e.key, e.payload])).toEqual([['order.paid', orderId, { orderId }]]);
    const state = await pool.query('SELECT state FROM orders WHERE id = $1', [orderId]);
    expect(state.rows).toEqual([{ state: 'paid' }]);
  });

  it('webhooks: a signed delivery is stored once and applied once; a forged one is refused', async () => {
    const express = (await import('express')).default;
    const { billingWebhooks } = await import('../../examples/readme/webhooks.js');
    const secret = `whsec_${Buffer.from('readme-example-webhook-secret!!').toString('base64')}`;
    const app = express();
    const { processor, sender } = await billingWebhooks(app, fromPg(pool), secret, db.schema);
    try {
      const url = await listen(createServer(app));
      await pool.query("INSERT INTO invoices (id, state) VALUES ('in_1', 'open')");
      const deliver = (id: string, version: number, signer = new Webhook(secret)) => {
        const body = JSON.stringify({ type: 'invoice.paid', data: { invoice: 'in_1', version } });
        const now = new Date();
        return fetch(`${url}/webhooks/billing`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'webhook-id': id,
            'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
            'webhook-signature': signer.sign(id, now, body),
          },
          body,
        });
      };
      const receipts = async () =>
        (
          await pool.query<{ delivery_id: string; state: string }>(
            'SELECT delivery_id, state FROM webhook_receipts ORDER BY delivery_id',
          )
        ).rows;
      expect((await deliver('msg_1', 2)).status).toBe(202);
      expect((await deliver('msg_1', 2)).status).toBe(200); // the sender's retry
      const forger = new Webhook(
        `whsec_${Buffer.from('someone-else-entirely-signing!!').toString('base64')}`,
      );
      expect((await deliver('msg_2', 3, forger)).status).toBe(401);
      expect(await until(receipts, (r) => r[0]?.state === 'applied')).toEqual([
        { delivery_id: 'msg_1', state: 'applied' },
      ]);
      expect((await deliver('msg_3', 1)).status).toBe(202); // older than the applied version, late
      expect(await until(receipts, (r) => r[1]?.state === 'superseded')).toEqual([
        { delivery_id: 'msg_1', state: 'applied' },
        { delivery_id: 'msg_3', state: 'superseded' },
      ]);
      expect((await pool.query("SELECT state FROM invoices WHERE id = 'in_1'")).rows).toEqual([
        { state: 'paid' },
      ]);
    } finally {
      await processor.stop();
      await sender.stop();
    }
  });

  it('client: a keyed POST answered 503 is retried with the same key, and one charge results', async () => {
    const keys: (string | undefined)[] = [];
    const url = await listen(
      createServer((req, res) => {
        const key = req.headers['idempotency-key'] as string | undefined;
        keys.push(key);
        // The first attempt fails after the provider charged; the retry finds the key and replays.
        if (keys.length === 1) return res.writeHead(503).end();
        res.writeHead(201, { 'content-type': 'application/json' }).end('{"id":"ch_1"}');
      }),
    );
    process.env.PROVIDER_URL = url; // read when the example's module is loaded
    const { charge } = await import('../../examples/readme/client.js');
    delete process.env.PROVIDER_URL;
    expect(await charge('order-7-charge', 1250)).toEqual({ id: 'ch_1' });
    expect(keys).toEqual(['"order-7-charge"', '"order-7-charge"']);
  });
});
