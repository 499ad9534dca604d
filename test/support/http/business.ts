/**
 * The business behind every test app, written once. Each framework's app (apps.ts) calls these
 * with the framework's `idem` handle and renders the returned reply the framework's own way
 * (`res.json`, `reply.send`, `c.json`, `res.writeHead().end()`).
 */
import { randomBytes } from 'node:crypto';
import type { IdempotencyContext } from 'idem/http';
import type { Harness } from './harness.js';

export interface Reply {
  status: number;
  headers?: Record<string, string | string[]>;
  /** A JSON value the framework serialises. */
  json?: unknown;
  /** Exact bytes (or text) with this content type, written as they are. */
  raw?: { contentType: string; data: Uint8Array | string };
}

/** The exact bytes the byte-fidelity routes answer: odd spacing, escapes, non-ASCII, all 256 octets. */
export const fixedJson = '{"b": 2,\n  "a":"\\u00e9 é 🎉",  "list":[1,2.50,  "x"] }';
export const fixedText = 'line 1\r\nline 2 \t trailing  \n émoji 🎉\n';

type Body = Record<string, unknown> | undefined;

export function business(h: Harness) {
  const s = `"${h.schema}"`;
  const countRun = (idem: IdempotencyContext) => {
    const id = `${idem.tenant}:${idem.key}`;
    h.runs.set(id, (h.runs.get(id) ?? 0) + 1);
    return h.runs.get(id)!;
  };
  return {
    async createOrder(idem: IdempotencyContext, body: Body, gate: string | undefined): Promise<Reply> {
      countRun(idem);
      const { rows } = await idem.tx.query<{ id: number }>(
        `INSERT INTO ${s}.orders (tenant, key, amount, note) VALUES ($1, $2, $3, $4) RETURNING id`,
        [idem.tenant, idem.key, Number(body?.amount ?? 0), body?.note ?? null],
      );
      if (gate) await h.gates.wait(gate);
      const id = rows[0]!.id;
      return {
        status: 201,
        headers: {
          location: `/orders/${id}`,
          'set-cookie': [`session=${randomBytes(4).toString('hex')}; HttpOnly`, 'seen=1'],
          'x-trace': randomBytes(6).toString('hex'),
        },
        json: { id, tenant: idem.tenant, amount: body?.amount ?? 0, note: body?.note ?? null },
      };
    },

    async updateOrder(idem: IdempotencyContext, id: string, body: Body): Promise<Reply> {
      countRun(idem);
      const { rowCount } = await idem.tx.query(`UPDATE ${s}.orders SET note = $2 WHERE id = $1`, [
        Number(id),
        (body?.note as string | undefined) ?? null,
      ]);
      return { status: 200, json: { id: Number(id), updated: rowCount, note: body?.note ?? null } };
    },

    async pay(idem: IdempotencyContext, body: Body): Promise<Reply> {
      countRun(idem);
      const declined = body?.card === 'declined';
      const { rows } = await idem.tx.query<{ id: number }>(
        `INSERT INTO ${s}.payments (tenant, key, status) VALUES ($1, $2, $3) RETURNING id`,
        [idem.tenant, idem.key, declined ? 'declined' : 'approved'],
      );
      return declined
        ? { status: 402, json: { error: 'card_declined', paymentId: rows[0]!.id } }
        : { status: 201, json: { paymentId: rows[0]!.id } };
    },

    /** Writes a row, then fails retryably on its first run per key. */
    async flaky(idem: IdempotencyContext): Promise<Reply> {
      const run = countRun(idem);
      await idem.tx.query(`INSERT INTO ${s}.flaky (key) VALUES ($1)`, [idem.key]);
      if (run === 1) throw Object.assign(new Error('upstream connection reset'), { code: 'ECONNRESET' });
      return { status: 201, json: { ok: true, run } };
    },

    async fragile(idem: IdempotencyContext): Promise<Reply> {
      countRun(idem);
      await idem.tx.query(`INSERT INTO ${s}.fragile (key) VALUES ($1)`, [idem.key]);
      return { status: 201, json: { ok: true }, headers: { 'set-cookie': 'fragile=1' } };
    },

    async bytes(idem: IdempotencyContext, kind: string): Promise<Reply> {
      countRun(idem);
      await idem.tx.query(`INSERT INTO ${s}.blobs (key, kind) VALUES ($1, $2)`, [idem.key, kind]);
      if (kind === 'json') return { status: 201, raw: { contentType: 'application/json', data: fixedJson } };
      if (kind === 'text') {
        return { status: 200, raw: { contentType: 'text/plain; charset=utf-8', data: fixedText } };
      }
      const octets = new Uint8Array(256 + 4096);
      for (let i = 0; i < 256; i++) octets[i] = i;
      octets.set(randomBytes(4096), 256); // differs on every run: only a stored body can match
      return { status: 200, raw: { contentType: 'application/octet-stream', data: octets } };
    },

    /** Two external calls with derived keys, as recorded steps; a gate can hold it between them. */
    async checkout(idem: IdempotencyContext, body: Body, gate: string | undefined): Promise<Reply> {
      countRun(idem);
      const reservation = await idem.call('reserve', ({ key }) => h.provider.call('/reserve', key));
      if (gate === 'crash' && h.crash) h.crash();
      else if (gate) await h.gates.wait(gate);
      const charge = await idem.call('charge', ({ key }) => h.provider.call('/charge', key));
      await idem.step('record-charge', (tx) =>
        tx.query(`INSERT INTO ${s}.payments (tenant, key, status, charge) VALUES ($1, $2, 'charged', $3)`, [
          idem.tenant,
          idem.key,
          charge.id,
        ]),
      );
      return {
        status: 201,
        json: { reservation: reservation.id, charge: charge.id, amount: body?.amount, resumed: idem.resumed },
      };
    },
  };
}

export type Business = ReturnType<typeof business>;
