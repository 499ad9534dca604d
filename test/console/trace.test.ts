/**
 * The console's intent page over a real PostgreSQL: an intent (a multi-step payment) runs a step
 * that adds an outbox event, the in-database transport hands the event to a consumer; then
 * `api/trace` answers its timeline by its names and by the event's id, and in Chromium an
 * operator opens the requests view, follows the row's trace link, and finds the same intent by
 * searching for the message id.
 */
import { hasChromium, useChromium } from './browser.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Timeline } from 'idem';
import { createInDatabasePublisher, createOutboxDispatcher } from 'idem/outbox';
import type { TasksView } from 'idem/console';
import type { TestSchema } from '../support/database.js';
import { createTraceBed, payOrder1001 } from '../support/trace.js';
import { startConsole, type ConsoleServer } from './support.js';

const intent = { tenant: 'acme', operation: 'create-payment', key: 'order-1001' };
const ref = 'acme/create-payment/order-1001';
/** The timeline's kinds, in causal order. */
const kindsInOrder = ['request', 'step', 'outbox', 'task', 'step', 'consumption'];

describe('the console traces an intent', () => {
  let db: TestSchema;
  let server: ConsoleServer;
  let eventId: string;
  let chargeKey: string;

  beforeAll(async () => {
    // Each phase at its own instant of a clock moved by hand: the causal order is the time order.
    const bed = await createTraceBed(4);
    db = bed.db;
    const { sql, schema, clock, inbox, claims } = bed;
    chargeKey = await payOrder1001(bed, 1);
    const publisher = createInDatabasePublisher({
      inbox,
      subscribers: [{ consumer: 'ledger', handler: () => Promise.resolve() }],
    });
    clock.advance(1000);
    expect((await createOutboxDispatcher({ sql, schema, publisher, clock }).drain()).published).toBe(1);
    const { rows } = await db.pool.query<{ id: string }>(`SELECT id::text AS id FROM "${schema}".outbox`);
    eventId = rows[0]!.id;
    // The intent's task fails for good: a dead task, listed by the claims view with its intent.
    clock.advance(1000);
    const [task] = await claims.claim('receipts');
    await claims.fail(task!, new Error('printer on fire'));
    server = await startConsole({ pool: db.pool, schema });
  });

  afterAll(async () => {
    await server?.close();
    await db?.close();
  });

  async function get<T>(params: Record<string, string>): Promise<{ status: number; body: T }> {
    const res = await fetch(`${server.url}/api/trace?${new URLSearchParams(params).toString()}`);
    return { status: res.status, body: (await res.json()) as T };
  }

  it('answers the timeline of an intent that ran a step, a call and an outbox event, consumed', async () => {
    const { status, body } = await get<Timeline>(intent);
    expect(status).toBe(200);
    expect(body.intent).toEqual({ ...intent, ref });
    expect(body.lookup).toEqual({ by: 'intent' });
    expect(body.items.map((item) => item.kind)).toEqual(kindsInOrder);
    expect(body.items[0]).toMatchObject({ kind: 'request', state: 'completed', fence: 1 });
    expect(body.items[1]).toMatchObject({ kind: 'step', name: 'order', stepKind: 'local', recorded: true });
    expect(body.items[2]).toMatchObject({
      kind: 'outbox',
      id: eventId,
      tenant: 'acme',
      topic: 'payments',
      type: 'payment.created',
      attempts: 0,
      deadAt: null,
    });
    expect((body.items[2] as { publishedAt: string | null }).publishedAt).not.toBeNull();
    expect(body.items[3]).toMatchObject({ kind: 'task', queue: 'receipts', state: 'dead' });
    expect(body.items[4]).toMatchObject({
      kind: 'step',
      name: 'charge',
      stepKind: 'call',
      derivedKey: chargeKey,
    });
    expect(body.items[5]).toMatchObject({
      kind: 'consumption',
      consumer: 'ledger',
      messageId: eventId,
      state: 'processed',
    });
  });

  it('finds the same intent by a message id (with or without its tenant) and by a derived key', async () => {
    const byMessage = await get<Timeline>({ tenant: 'acme', message: eventId });
    expect(byMessage.status).toBe(200);
    expect(byMessage.body.intent.ref).toBe(ref);
    expect(byMessage.body.lookup).toEqual({ by: 'message', value: eventId });
    expect(byMessage.body.items).toEqual((await get<Timeline>(intent)).body.items);
    expect((await get<Timeline>({ message: eventId })).body.intent.ref).toBe(ref);
    const byKey = await get<Timeline>({ derivedKey: chargeKey });
    expect(byKey.body).toMatchObject({ intent: { ref }, lookup: { by: 'derived-key', value: chargeKey } });
  });

  it('answers 404 for what no record names, and 400 for a lookup that names nothing or two things', async () => {
    expect((await get({ ...intent, key: 'order-9' })).status).toBe(404);
    // The tenant is an exact match: another tenant's message is not found.
    expect((await get({ tenant: 'globex', message: eventId })).status).toBe(404);
    const none = await get<{ 'invalid-params': { name: string }[] }>({});
    expect(none.status).toBe(400);
    expect((await get({ message: eventId, derivedKey: chargeKey })).status).toBe(400);
    expect((await get({ tenant: 'acme', operation: 'create-payment' })).body).toMatchObject({
      status: 400,
      'invalid-params': [{ name: 'key' }],
    });
    expect((await get({ ...intent, limit: '5' })).status).toBe(400);
  });

  it('names the intent on the rows of the other views', async () => {
    const res = await fetch(`${server.url}/api/tasks`);
    const tasks = (await res.json()) as TasksView;
    expect(tasks.dead.map((t) => t.intent)).toEqual([intent]);
  });

  describe.skipIf(!hasChromium)('in Chromium', () => {
    const browser = useChromium();

    const items = () => browser.page.locator('table.grid > tbody > tr');
    const kinds = () => browser.page.locator('table.grid > tbody > tr > td:nth-child(1)').allInnerTexts();

    it('opens the requests view and follows the row to its timeline', async () => {
      await browser.page.goto(server.url);
      const row = browser.page.locator('table.grid > tbody > tr', { hasText: 'order-1001' });
      await row.waitFor();
      await row.locator('a.intent-link').click();
      await browser.page.locator('#timeline').waitFor();
      expect(await browser.page.locator('#timeline').innerText()).toBe('acme / create-payment / order-1001');
      expect(browser.page.url()).toContain('#/trace?tenant=acme&operation=create-payment&key=order-1001');
      expect(await browser.page.locator('#tabs a.active').innerText()).toBe('Trace');
      expect(await kinds()).toEqual(kindsInOrder);
      const text = await items().allInnerTexts();
      expect(text[2]).toContain('payment.created');
      expect(text[2]).toContain(eventId);
      expect(text[3]).toContain('printer on fire');
      expect(text[4]).toContain(chargeKey);
      expect(text[5]).toContain('ledger');
    });

    it('searches by message id and finds the same intent', async () => {
      await browser.page.click('#tabs a[data-tab=trace]');
      await browser.page.locator('#filter-message').waitFor();
      await expect.poll(() => browser.page.locator('#timeline').count()).toBe(0);
      await browser.page.fill('#filter-message', eventId);
      await browser.page.click('form.filters button[type=submit]');
      await browser.page.locator('#timeline').waitFor();
      expect(await browser.page.locator('#timeline').innerText()).toBe('acme / create-payment / order-1001');
      expect(await browser.page.locator('.panel-note', { hasText: 'Found by message id' }).count()).toBe(1);
      expect(await kinds()).toEqual(kindsInOrder);
    });

    it('follows a dead task of the claims view to the same timeline', async () => {
      await browser.page.click('#tabs a[data-tab=tasks]');
      const dead = browser.page.locator('tr.row-dead');
      await dead.waitFor();
      await dead.locator('a.intent-link').click();
      await browser.page.locator('#timeline').waitFor();
      expect(await browser.page.locator('#timeline').innerText()).toBe('acme / create-payment / order-1001');
      expect(await kinds()).toEqual(kindsInOrder);
    });

    it('says when nothing names what was searched', async () => {
      await browser.page.click('#tabs a[data-tab=trace]');
      await expect.poll(() => browser.page.locator('#timeline').count()).toBe(0);
      await browser.page.fill('#filter-message', 'no-such-message');
      await browser.page.click('form.filters button[type=submit]');
      await browser.page.locator('#trace-missing').waitFor();
      expect(await browser.page.locator('#trace-missing').innerText()).toContain(
        'no record names this intent',
      );
    });

    it('raised no script errors', () => {
      expect(browser.pageErrors).toEqual([]);
    });
  });
});
