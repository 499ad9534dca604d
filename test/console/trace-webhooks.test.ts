/**
 * The console's intent page reached from webhooks, over a real PostgreSQL and real HTTP: one
 * signed delivery's handler acts for a payment (`onBehalfOf`), another's starts an intent and then
 * fails for good (a dead receipt); an intent sends a webhook the endpoint refuses (a failed
 * delivery). `api/trace?delivery=…&source=…` answers each intent's timeline with the receipt on
 * it; in Chromium an operator follows the dead receipt's and the failed delivery's rows of the
 * webhooks view to their timelines, and finds the payment by searching for the refund's delivery id.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onBehalfOf, type Timeline } from 'idem';
import { generateWebhookSecret } from 'idem/webhooks';
import type { WebhooksView } from 'idem/console';
import type { TestSchema } from '../support/database.js';
import { createTraceBed, startBedWebhooks } from '../support/trace.js';
import { post, signStandard, standardSecret, type TestServer } from '../webhooks/support.js';
import { hasChromium, useChromium } from './browser.js';
import { startConsole, type ConsoleServer } from './support.js';

const payment = { tenant: 'acme', operation: 'create-payment', key: 'order-1001' };
const refund = 'evt_refund_1001';
const failing = 'evt_invoice_7';
const invoice = { tenant: 'acme', operation: 'apply-invoice', key: failing };
const notify = { tenant: 'acme', operation: 'notify-shipped', key: 'order-1001' };
const shipped = 'msg_shipped_1001';

describe('the console traces an intent from a webhook delivery', () => {
  let db: TestSchema;
  let hooks: TestServer;
  let server: ConsoleServer;

  beforeAll(async () => {
    const bed = await createTraceBed();
    db = bed.db;
    const { sql, schema, clock, idem } = bed;
    await idem.run({ ...payment, request: { amount: 1250 } }, () => Promise.resolve('charged'));
    const webhooks = await startBedWebhooks(bed, [standardSecret]);
    hooks = webhooks.server;
    clock.advance(1000);
    for (const [id, type] of [
      [refund, 'charge.refunded'],
      [failing, 'invoice.paid'],
    ] as const) {
      const body = JSON.stringify({ type, data: {} });
      const sent = await post(webhooks.url, signStandard({ id, body, timestampMs: clock.now() }));
      expect(sent.status).toBe(202);
    }
    clock.advance(1000);
    const processor = webhooks.processor({
      // The provider refunded the payment's charge: recorded as acting for that intent.
      'charge.refunded': () => onBehalfOf(payment, () => Promise.resolve()),
      // Starts an intent (committed on its own), then fails for good: a dead receipt.
      'invoice.paid': async (_tx, event) => {
        await idem.run({ ...invoice, key: event.deliveryId, request: {} }, () => Promise.resolve('seen'));
        throw Object.assign(new Error('ledger refused the invoice'), { retryable: false });
      },
    });
    expect((await processor.drain()).sort()).toEqual(['applied', 'dead']);

    // An endpoint whose secret the receiver does not know: it answers 401, one attempt, failed.
    const sender = webhooks.sender({ maxAttempts: 1 });
    await sender.endpoints.create({ id: 'crm', url: webhooks.url, secrets: [generateWebhookSecret()] });
    await idem.run({ ...notify, request: {} }, async () => {
      await sender.enqueue(sql, { id: shipped, type: 'order.shipped', payload: { type: 'order.shipped' } });
      return 'sent';
    });
    clock.advance(1000);
    expect((await sender.drain()).map((r) => r.outcome)).toEqual(['failed']);
    server = await startConsole({ pool: db.pool, schema });
  });

  afterAll(async () => {
    await server?.close();
    await hooks?.close();
    await db?.close();
  });

  async function get<T>(route: string, params: Record<string, string>): Promise<{ status: number; body: T }> {
    const res = await fetch(`${server.url}/api/${route}?${new URLSearchParams(params).toString()}`);
    return { status: res.status, body: (await res.json()) as T };
  }

  it('answers the timeline of the intent a received delivery acted for', async () => {
    const { status, body } = await get<Timeline>('trace', { delivery: refund, source: 'billing' });
    expect(status).toBe(200);
    expect(body.intent).toEqual({ ...payment, ref: 'acme/create-payment/order-1001' });
    expect(body.lookup).toEqual({
      by: 'delivery',
      value: refund,
      source: 'billing',
      intents: ['acme/create-payment/order-1001'],
    });
    expect(body.items.map((item) => item.kind)).toEqual(['request', 'webhook-received']);
    expect(body.items[1]).toMatchObject({
      source: 'billing',
      deliveryId: refund,
      type: 'charge.refunded',
      relation: 'acted-for',
      state: 'applied',
    });
  });

  it('answers the timeline of the intent a dead receipt started, with the tenant given', async () => {
    // The receiver records for the default tenant ''; an empty parameter is no filter.
    const { body } = await get<Timeline>('trace', { delivery: failing, source: 'billing', tenant: '' });
    expect(body.intent.ref).toBe(`acme/apply-invoice/${failing}`);
    expect(body.items[1]).toMatchObject({ relation: 'caused', state: 'dead' });
    expect((await get('trace', { delivery: failing, source: 'billing', tenant: 'acme' })).status).toBe(404);
    expect((await get('trace', { delivery: 'evt_unknown', source: 'billing' })).status).toBe(404);
    // Without a source the id is a sent message's: this service sent none.
    expect((await get('trace', { delivery: refund })).status).toBe(404);
  });

  it('answers 400 naming the parameter for a delivery beside another lookup, or a source alone', async () => {
    const refused = async (params: Record<string, string>) => {
      const { status, body } = await get<{ status: number; 'invalid-params': { name: string }[] }>(
        'trace',
        params,
      );
      expect(status).toBe(400);
      return body['invalid-params'].map((p) => p.name);
    };
    expect(await refused({ delivery: refund, message: refund })).toEqual(['message']);
    expect(await refused({ delivery: refund, derivedKey: 'k' })).toEqual(['derivedKey']);
    expect(await refused({ ...payment, delivery: refund })).toEqual(['delivery']);
    expect(await refused({ source: 'billing' })).toEqual(['operation']);
    expect(await refused({ message: refund, source: 'billing' })).toEqual(['source']);
    expect(await refused({ delivery: refund, source: 'bad source\u0001' })).toEqual(['source']);
  });

  it('names each receipt’s tenant in the webhooks view', async () => {
    const { body } = await get<WebhooksView>('webhooks', {});
    expect(body.dead.map((r) => [r.tenant, r.source, r.deliveryId])).toEqual([['', 'billing', failing]]);
    expect(body.failedDeliveries.map((d) => [d.tenant, d.messageId, d.eventType])).toEqual([
      ['acme', shipped, 'order.shipped'],
    ]);
  });

  describe.skipIf(!hasChromium)('in Chromium', () => {
    const browser = useChromium();

    const rows = () => browser.page.locator('table.grid > tbody > tr').allInnerTexts();
    const kinds = () => browser.page.locator('table.grid > tbody > tr > td:nth-child(1)').allInnerTexts();

    it('follows a dead receipt of the webhooks view to the timeline of the intent it started', async () => {
      await browser.page.goto(`${server.url}/#/webhooks`);
      const dead = browser.page.locator('tr.row-dead', { hasText: failing });
      await dead.waitFor();
      await dead.locator('a.delivery-link').click();
      await browser.page.locator('#timeline').waitFor();
      expect(browser.page.url()).toContain(`#/trace?delivery=${failing}&source=billing`);
      expect(await browser.page.locator('#timeline').innerText()).toBe(`acme / apply-invoice / ${failing}`);
      expect(await kinds()).toEqual(['request', 'webhook-received']);
      const text = await rows();
      expect(text[1]).toContain('started this intent');
      expect(text[1]).toContain('ledger refused the invoice');
    });

    it('follows a failed delivery of the webhooks view to the timeline of the intent that sent it', async () => {
      await browser.page.click('#tabs a[data-tab=webhooks]');
      const failed = browser.page.locator('tr.row-dead', { hasText: shipped });
      await failed.waitFor();
      await failed.locator('a.delivery-link').click();
      await browser.page.locator('#timeline').waitFor();
      expect(browser.page.url()).toContain(`#/trace?delivery=${shipped}&tenant=acme`);
      expect(await browser.page.locator('#timeline').innerText()).toBe('acme / notify-shipped / order-1001');
      expect(await kinds()).toEqual(['request', 'webhook-sent', 'webhook-attempt']);
      const text = await rows();
      expect(text[1]).toContain('order.shipped → crm');
      expect(text[1]).toContain('HTTP 401');
      expect(text[2]).toContain('failed');
    });

    it('searches by delivery id and source and finds the intent the delivery acted for', async () => {
      await browser.page.click('#tabs a[data-tab=trace]');
      await browser.page.locator('#filter-delivery').waitFor();
      await expect.poll(() => browser.page.locator('#timeline').count()).toBe(0);
      await browser.page.fill('#filter-delivery', refund);
      await browser.page.fill('#filter-source', 'billing');
      await browser.page.click('form.filters button[type=submit]');
      await browser.page.locator('#timeline').waitFor();
      expect(await browser.page.locator('#timeline').innerText()).toBe('acme / create-payment / order-1001');
      const note = browser.page.locator('.panel-note', { hasText: `Found by delivery id ${refund}` });
      expect(await note.count()).toBe(1);
      expect(await kinds()).toEqual(['request', 'webhook-received']);
      expect((await rows())[1]).toContain('acted for this intent');
    });

    it('raised no script errors', () => {
      expect(browser.pageErrors).toEqual([]);
    });
  });
});
