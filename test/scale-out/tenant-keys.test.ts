/**
 * Tenant keys (migration 0008) as a user sees them: rows written before the migration keep working
 * under the default tenant, code that names no tenant is unchanged, and where tenants are named,
 * the same id under two tenants is two things (inbox ids, outbox ids and ordering keys, webhook
 * delivery ids and entity versions, sender endpoints), and workers scoped to a tenant touch only it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createClaims } from 'idem/claims';
import { createManualClock, type ManualClock } from 'idem/testing';
import { createInbox } from 'idem/inbox';
import { migrate, migrations } from 'idem';
import { createOutbox, createOutboxDispatcher, type OutboxEvent, type Publisher } from 'idem/outbox';
import {
  createStandardWebhooksVerifier,
  createWebhookProcessor,
  createWebhookReceiver,
  createWebhookSender,
  recordHeaders,
  type WebhookEvent,
} from 'idem/webhooks';
import { countRows, createTestSchema, type TestSchema, schemaBefore } from '../support/database.js';
import { signStandard, standardSecret } from '../webhooks/support.js';
import { recordingEndpoint } from '../support/http/endpoint.js';

/** A publisher that records what it was given and fails the events `fail` says. */
function recorder(fail: (event: OutboxEvent) => boolean = () => false) {
  const seen: OutboxEvent[] = [];
  const publisher: Publisher = {
    publish: async (events) =>
      events.map((event) => {
        seen.push(event);
        return fail(event)
          ? { id: event.id, ok: false as const, error: new Error('refused'), retryable: false }
          : { id: event.id, ok: true as const };
      }),
  };
  return { seen, publisher };
}

describe('rows written before migration 0008', () => {
  const old = schemaBefore(8);
  const { schema, s } = old;

  it('keep working under the default tenant: inbox ids dedupe, events publish, receipts process', async () => {
    const now = new Date();
    // Written by the code before 0008 (its statements' shapes).
    await old.pool.query(
      `INSERT INTO ${s}.inbox (consumer, message_id, state, processed_at, expires_at)
        VALUES ('billing', 'm-old', 'processed', $1, $1::timestamptz + interval '1 day')`,
      [now],
    );
    await old.pool.query(
      `INSERT INTO ${s}.outbox (id, aggregatetype, aggregateid, type, payload, created_at, available_at)
        VALUES ('0190f5b4-7c1e-7000-8000-0000000000aa', 'orders', 'o-1', 'order.paid', '{"n":1}', $1, $1)`,
      [now],
    );
    await old.pool.query(
      `INSERT INTO ${s}.webhook_endpoints (id, url, secrets, created_at)
        VALUES ('ep', 'http://127.0.0.1:9/', ARRAY['${standardSecret}'], $1)`,
      [now],
    );
    const signed = signStandard({
      id: 'd-old',
      body: JSON.stringify({ type: 'paid' }),
      timestampMs: now.getTime(),
    });
    await old.pool.query(
      `INSERT INTO ${s}.webhook_receipts (source, delivery_id, event_type, body, received_at, next_attempt_at, expires_at)
        VALUES ('billing', 'd-old', 'paid', $1, $2, $2, $2::timestamptz + interval '1 day')`,
      [Buffer.from(signed.body), now],
    );

    // 0008 and every migration after it.
    expect((await migrate(fromPg(old.pool), { schema })).applied).toEqual(
      migrations(schema)
        .filter((m) => m.version >= 8)
        .map((m) => m.name),
    );
    const sql = fromPg(old.pool);

    const inbox = createInbox({ sql, schema });
    let ran = 0;
    expect(await inbox.handle({ consumer: 'billing', messageId: 'm-old' }, async () => ran++)).toEqual({
      duplicate: true,
    });
    expect(ran).toBe(0);

    const { seen, publisher } = recorder();
    await createOutboxDispatcher({ sql, schema, publisher }).drain();
    expect(seen.map((e) => [e.tenant, e.id, e.payload])).toEqual([
      ['', '0190f5b4-7c1e-7000-8000-0000000000aa', { n: 1 }],
    ]);

    const handled: WebhookEvent[] = [];
    const processor = createWebhookProcessor({
      sql,
      schema,
      handlers: { billing: { paid: async (_tx, event) => void handled.push(event) } },
    });
    expect(await processor.drain()).toEqual(['applied']);
    expect(handled.map((e) => [e.tenant, e.deliveryId])).toEqual([['', 'd-old']]);
    // A redelivery of the old receipt is still a duplicate.
    const receiver = createWebhookReceiver({
      sql,
      schema,
      sources: { billing: createStandardWebhooksVerifier({ secrets: [standardSecret] }) },
    });
    const again = await receiver.receive('billing', {
      headers: recordHeaders(signed.headers),
      body: signed.body,
    });
    expect(again.status).toBe(200);

    const sender = createWebhookSender({ sql, schema });
    expect((await sender.endpoints.list()).map((e) => [e.tenant, e.id])).toEqual([['', 'ep']]);
  });
});

describe('the same id under two tenants', () => {
  let db: TestSchema;
  let clock: ManualClock;
  beforeAll(async () => {
    db = await createTestSchema();
    clock = createManualClock({ startMs: Date.parse('2026-04-01T00:00:00Z') });
  });
  afterAll(() => db.close());

  it('inbox: one message id is processed once per tenant, and a duplicate only within its tenant', async () => {
    const inbox = createInbox({ sql: fromPg(db.pool), schema: db.schema, clock });
    const runs: string[] = [];
    const handle = (tenant?: string) =>
      inbox.handle(
        { consumer: 'billing', messageId: 'm-1', ...(tenant === undefined ? {} : { tenant }) },
        async (_tx, ctx) => {
          runs.push(`${ctx.tenant ?? '?'}:${ctx.deriveKey('charge')}`);
        },
      );
    expect(await handle('acme')).toMatchObject({ duplicate: false });
    expect(await handle('globex')).toMatchObject({ duplicate: false });
    expect(await handle()).toMatchObject({ duplicate: false });
    expect(await handle('acme')).toEqual({ duplicate: true });
    expect(await handle()).toEqual({ duplicate: true });
    // Three runs, three different downstream keys.
    expect(runs.map((r) => r.split(':')[0])).toEqual(['acme', 'globex', '']);
    expect(new Set(runs.map((r) => r.split(':')[1])).size).toBe(3);
    // An inbox bound to a tenant uses it for messages that name none.
    const acme = createInbox({ sql: fromPg(db.pool), schema: db.schema, clock, tenant: 'acme' });
    expect(await acme.get({ consumer: 'billing', messageId: 'm-1' })).toMatchObject({ tenant: 'acme' });
  });

  /** The suite's outbox, on its schema and clock, with the `sql` it writes through. */
  const outboxOnDb = () => {
    const sql = fromPg(db.pool);
    return { sql, outbox: createOutbox({ sql, schema: db.schema, clock }) };
  };

  it('outbox: ids and ordering keys are per tenant; a dispatcher scoped to a tenant publishes only its events', async () => {
    const { sql, outbox } = outboxOnDb();
    const id = '0190f5b4-7c1e-7000-8000-0000000000bb';
    await sql.transaction(async (tx) => {
      for (const tenant of ['acme', 'globex']) {
        await outbox.add(tx, { tenant, id, topic: 'orders', key: 'o-1', type: 'first', payload: { tenant } });
        await outbox.add(tx, { tenant, topic: 'orders', key: 'o-1', type: 'second', payload: { tenant } });
      }
    });
    expect((await outbox.get({ id: id, tenant: 'globex' }))?.payload).toEqual({ tenant: 'globex' });
    expect(await outbox.get({ id: id })).toBeNull(); // the default tenant has no such event

    // acme's first event dies: acme's key o-1 is parked, globex's key o-1 is not.
    const acme = recorder((e) => e.tenant === 'acme');
    const scoped = createOutboxDispatcher({
      sql,
      schema: db.schema,
      clock,
      publisher: acme.publisher,
      tenants: ['acme'],
    });
    await scoped.drain();
    expect(acme.seen.map((e) => [e.tenant, e.type])).toEqual([['acme', 'first']]);
    const all = recorder();
    await createOutboxDispatcher({ sql, schema: db.schema, clock, publisher: all.publisher }).drain();
    expect(all.seen.map((e) => [e.tenant, e.type])).toEqual([
      ['globex', 'first'],
      ['globex', 'second'],
    ]);
    expect(await outbox.stats({ tenant: 'acme' })).toMatchObject({ dead: 1, parked: 1 });
    expect(await outbox.redrive({ tenant: 'acme' })).toEqual({ revived: 1, released: 1 });
    const after = recorder();
    await createOutboxDispatcher({ sql, schema: db.schema, clock, publisher: after.publisher }).drain();
    expect(after.seen.map((e) => [e.tenant, e.type])).toEqual([
      ['acme', 'first'],
      ['acme', 'second'],
    ]);
  });

  it('outbox: two tenants’ events with one id in one batch each get their own outcome', async () => {
    const { sql, outbox } = outboxOnDb();
    const id = '0190f5b4-7c1e-7000-8000-0000000000cc';
    await sql.transaction(async (tx) => {
      for (const tenant of ['t-fails', 't-works']) {
        await outbox.add(tx, { tenant, id, topic: 'shared-id', key: tenant, type: 't', payload: { tenant } });
      }
    });
    // Results are reported by id: the two events go out in separate waves, so each outcome is its own.
    const waves: string[][] = [];
    const publisher: Publisher = {
      publish: async (events) => {
        waves.push(events.map((e) => e.tenant ?? ''));
        return events.map((e) =>
          e.tenant === 't-fails'
            ? { id: e.id, ok: false as const, error: new Error('no'), retryable: true }
            : { id: e.id, ok: true as const },
        );
      },
    };
    const result = await createOutboxDispatcher({
      sql,
      schema: db.schema,
      clock,
      publisher,
      topics: ['shared-id'],
    }).drain();
    expect(result).toMatchObject({ published: 1, retried: 1 });
    expect(waves.map((w) => w.length)).toEqual([1, 1]);
    expect(await outbox.get({ id: id, tenant: 't-works' })).toMatchObject({ attempts: 0 });
    expect((await outbox.get({ id: id, tenant: 't-works' }))?.publishedAt).not.toBeNull();
    expect(await outbox.get({ id: id, tenant: 't-fails' })).toMatchObject({ attempts: 1, publishedAt: null });
  });

  it('webhooks: a delivery id and an entity version are per tenant of the source', async () => {
    const sql = fromPg(db.pool);
    const receiver = createWebhookReceiver({
      sql,
      schema: db.schema,
      clock,
      sources: {
        'stripe-acme': {
          verifier: createStandardWebhooksVerifier({ secrets: [standardSecret] }),
          tenant: 'acme',
        },
        'stripe-globex': {
          verifier: createStandardWebhooksVerifier({ secrets: [standardSecret] }),
          tenant: 'globex',
        },
      },
    });
    const deliver = async (source: string, id: string, version: number) => {
      const signed = signStandard({
        id,
        body: JSON.stringify({ type: 'customer.updated', customer: 'cus_1', version }),
        timestampMs: clock.now(),
      });
      return (await receiver.receive(source, { headers: recordHeaders(signed.headers), body: signed.body }))
        .status;
    };
    expect(await deliver('stripe-acme', 'evt_1', 5)).toBe(202);
    expect(await deliver('stripe-globex', 'evt_1', 3)).toBe(202); // same id, other tenant: stored
    expect(await deliver('stripe-acme', 'evt_1', 5)).toBe(200); // a redelivery within the tenant
    const applied: string[] = [];
    const handler = {
      entity: (e: WebhookEvent) => {
        const body = e.json<{ customer: string; version: number }>();
        return { key: body.customer, version: body.version, scope: 'customers' };
      },
      handle: async (_tx: unknown, e: WebhookEvent) =>
        void applied.push(`${e.tenant}:${e.json<{ version: number }>().version}`),
    };
    const processor = createWebhookProcessor({
      sql,
      schema: db.schema,
      clock,
      handlers: {
        'stripe-acme': { 'customer.updated': handler },
        'stripe-globex': { 'customer.updated': handler },
      },
    });
    await processor.drain();
    // Version 5 of acme's customer does not supersede version 3 of globex's: both apply.
    expect(applied.sort()).toEqual(['acme:5', 'globex:3']);
    const { rows } = await db.pool.query(
      `SELECT tenant_id, version::int AS version FROM "${db.schema}".webhook_entity_versions ORDER BY 1`,
    );
    expect(rows).toEqual([
      { tenant_id: 'acme', version: 5 },
      { tenant_id: 'globex', version: 3 },
    ]);
  });

  it('sender: a tenant’s message goes to that tenant’s endpoints only', async () => {
    const server = await recordingEndpoint(204);
    const { received } = server;
    try {
      const sender = createWebhookSender({
        sql: fromPg(db.pool),
        schema: db.schema,
        allowedDestinations: ['127.0.0.1'],
      });
      await sender
        .endpointsOf('acme')
        .create({ id: 'main', url: `${server.url}/acme`, secrets: [standardSecret] });
      await sender
        .endpointsOf('globex')
        .create({ id: 'main', url: `${server.url}/globex`, secrets: [standardSecret] });
      expect(await sender.endpoints.list()).toEqual([]);
      const results = await sender.deliver({
        tenant: 'acme',
        id: 'msg_1',
        type: 'invoice.paid',
        payload: {},
      });
      expect(results.map((r) => [r.tenant, r.endpointId, r.outcome])).toEqual([
        ['acme', 'main', 'delivered'],
      ]);
      expect(received).toEqual(['/acme']);
    } finally {
      await server.close();
    }
  });

  it('outbox for Debezium: the Event Router’s columns, the tenant beside them, and cleanup of captured rows', async () => {
    const { rows } = await db.pool.query<{ column_name: string; data_type: string }>(
      `SELECT column_name, data_type FROM information_schema.columns
        WHERE table_schema = $1 AND table_name = 'outbox'
          AND column_name IN ('id', 'aggregatetype', 'aggregateid', 'type', 'payload', 'tenant_id')
        ORDER BY column_name`,
      [db.schema],
    );
    expect(rows).toEqual([
      { column_name: 'aggregateid', data_type: 'text' },
      { column_name: 'aggregatetype', data_type: 'text' },
      { column_name: 'id', data_type: 'uuid' },
      { column_name: 'payload', data_type: 'jsonb' },
      { column_name: 'tenant_id', data_type: 'text' },
      { column_name: 'type', data_type: 'text' },
    ]);
    // With CDC nothing marks rows published: cleanup deletes captured rows by age, per tenant.
    const { sql, outbox } = outboxOnDb();
    await sql.transaction(async (tx) => {
      for (const tenant of ['cdc-a', 'cdc-b']) {
        await outbox.add(tx, { tenant, topic: 'cdc', key: 'k', type: 't', payload: {} });
      }
    });
    clock.advance(3_600_001);
    const count = (tenant: string) =>
      countRows(db.pool, `SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE tenant_id = $1`, [
        tenant,
      ]);
    expect(
      (await outbox.sweep({ capturedByCdc: true, olderThanMs: 3_600_000, tenants: ['cdc-a'] })).deleted,
    ).toBe(1);
    expect([await count('cdc-a'), await count('cdc-b')]).toEqual([0, 1]);
  });

  it('claims: a claim for one tenant takes only that tenant’s tasks', async () => {
    const claims = createClaims({ sql: fromPg(db.pool), schema: db.schema, clock });
    for (const tenant of ['acme', 'globex']) {
      await claims.enqueue({ tenant, queue: 'mail', key: 'k-1', payload: { tenant } });
    }
    const acme = await claims.claim('mail', { tenant: 'acme', limit: 10 });
    expect(acme.map((t) => t.tenant)).toEqual(['acme']);
    const { completed } = await claims.completeMany(acme);
    expect(completed).toHaveLength(1);
    expect((await claims.claim('mail', { limit: 10 })).map((t) => t.tenant)).toEqual(['globex']);
    await expect(claims.completeAndClaim(acme, 'mail', { tenant: 'globex' })).rejects.toThrow(
      /another tenant/,
    );
  });
});
