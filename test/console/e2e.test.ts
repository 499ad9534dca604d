/**
 * End to end in headless Chromium: an operator clicks through the console's main views over a
 * schema filled by idem's real APIs, opens a request, redrives a dead event, and reads the inbox,
 * webhook receipts, claims and sagas. With WRITE_SCREENSHOTS=1 it also writes docs/screenshots/.
 */
import { mkdirSync } from 'node:fs';
import type { Browser, Page } from 'playwright-core';
import { hasChromium, launchChromium } from './browser.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { hostileBody, populate, startConsole, type ConsoleServer, type Populated } from './support.js';

const screenshots = process.env.WRITE_SCREENSHOTS === '1';
const screenshotDir = new URL('../../docs/screenshots/', import.meta.url);

describe.skipIf(!hasChromium)('console in Chromium', () => {
  let db: TestSchema;
  let data: Populated;
  let server: ConsoleServer;
  let browser: Browser;
  let page: Page;
  let pageErrors: string[] = [];

  beforeAll(async () => {
    db = await createTestSchema();
    data = await populate(db.pool, db.schema);
    server = await startConsole({ pool: db.pool, schema: db.schema, liveIntervalMs: 500 });
    ({ browser, page, pageErrors } = await launchChromium());
    if (screenshots) mkdirSync(screenshotDir, { recursive: true });
  });
  afterAll(async () => {
    await browser?.close();
    await server?.close();
    await data?.finish();
    await db?.close();
  });

  async function shoot(name: string): Promise<void> {
    if (!screenshots) return;
    await page.mouse.move(0, 0);
    await page.screenshot({ path: new URL(`console-${name}.png`, screenshotDir).pathname, fullPage: true });
  }

  const rows = (scope = 'table.grid') => page.locator(`${scope} > tbody > tr`);
  const counter = (id: string) => page.locator(`[data-counter="${id}"] .metric-value`);

  it('lists keyed requests with the stuck one highlighted, and live counters', async () => {
    await page.goto(`${server.url}`);
    await expect.poll(() => rows().count()).toBe(8);
    const stuck = page.locator('tr.row-stuck');
    await expect.poll(() => stuck.count()).toBe(1);
    expect(await stuck.locator('td').nth(0).innerText()).toBe('stuck');
    expect(await stuck.locator('td').nth(3).innerText()).toBe('refund-7');
    expect(await stuck.innerText()).toMatch(/lapsed \d+m \d+s ago/);
    await expect.poll(() => counter('requests-stuck').innerText()).toBe('1');
    expect(await counter('outbox-dead').innerText()).toBe('1');
    expect(await counter('tasks-dead').innerText()).toBe('1');
    expect(await page.locator('#live').innerText()).toBe('live');
    await shoot('requests');
  });

  it('filters by exact tenant and by state', async () => {
    await page.fill('#filter-tenant', 'acme');
    await page.click('form.filters button[type=submit]');
    await expect.poll(() => rows().count()).toBe(5);
    const tenants = await page.locator('table.grid > tbody > tr > td:nth-child(2)').allInnerTexts();
    expect(new Set(tenants)).toEqual(new Set(['acme']));
    expect(page.url()).toContain('#/requests?tenant=acme');
    await page.selectOption('#filter-state', 'stuck');
    await page.click('form.filters button[type=submit]');
    await expect.poll(() => rows().count()).toBe(1);
    expect(await rows().first().locator('td').nth(3).innerText()).toBe('refund-7');
  });

  it('pages through requests with "Load more"', async () => {
    await page.goto(`${server.url}#/requests?limit=3`);
    await expect.poll(() => rows().count()).toBe(3);
    await page.click('#load-more');
    await expect.poll(() => rows().count()).toBe(6);
    await page.click('#load-more');
    await expect.poll(() => rows().count()).toBe(8);
    expect(await page.locator('#load-more').count()).toBe(0);
    // Every request once: no row repeated or skipped across pages.
    const identities = await rows().evaluateAll((trs) =>
      trs.map((tr) => [1, 2, 3].map((i) => (tr.children[i] as HTMLElement).innerText).join(' / ')),
    );
    expect(new Set(identities).size).toBe(8);
  });

  it('opens a request: stored response, redacted headers, steps', async () => {
    await page.goto(
      `${server.url}#/requests?tenant=acme&operation=${encodeURIComponent('POST /v1/payments')}`,
    );
    await expect.poll(() => rows().count()).toBe(3);
    await page.locator('a', { hasText: 'order-1001' }).click();
    await page.waitForSelector('text=Stored response');
    expect(await page.locator('.panel h2').first().innerText()).toContain('completed');
    expect(await page.locator('.badge', { hasText: 'HTTP 201' }).count()).toBe(1);
    const headers = await page.locator('table.kv').first().innerText();
    expect(headers).toMatch(/set-cookie\s+\[redacted\]/);
    expect(headers).toMatch(/location\s+\/v1\/payments\/pay_c0/);
    const body = await page.locator('figure.preview pre').first().innerText();
    expect(JSON.parse(body)).toEqual({ id: 'pay_c0', amount: 1000, charge_id: 'ch_c0', status: 'succeeded' });
    const html = await page.content();
    expect(html).not.toContain('abc123');
    expect(html).not.toContain('sig-must-not-show');
    const steps = await page.locator('table.grid > tbody > tr > td:nth-child(2)').allInnerTexts();
    expect(steps.sort()).toEqual(['charge', 'record-payment']);
    await shoot('request');
  });

  it('shows why a crashed operation is stuck and where it resumes', async () => {
    await page.goto(`${server.url}#/request?tenant=acme&operation=refund-payment&key=refund-7`);
    const callout = page.locator('#stuck-callout');
    await callout.waitFor();
    expect(await callout.innerText()).toMatch(
      /lease that lapsed \d+m \d+s ago.*after step “reserve”.*fence 1 → 2/,
    );
    await shoot('request-stuck');
  });

  it('renders an attacker-controlled body as text, never as markup', async () => {
    await page.goto(
      `${server.url}#/request?tenant=acme&operation=${encodeURIComponent('POST /v1/notes')}&key=note-1`,
    );
    await page.waitForSelector('text=Stored response');
    expect(await page.locator('figure.preview pre').first().innerText()).toBe(hostileBody);
    expect(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss)).toBeUndefined();
    expect(await page.locator('#view img').count()).toBe(0);
    expect(await page.locator('#view script').count()).toBe(0);
  });

  it('shows a binary body as a hex dump', async () => {
    await page.goto(
      `${server.url}#/request?tenant=globex&operation=${encodeURIComponent('POST /v1/images')}&key=image-1`,
    );
    await page.waitForSelector('text=Stored response');
    expect(await page.locator('figure.preview figcaption').first().innerText()).toContain(
      '12 bytes · binary (hex)',
    );
    expect(await page.locator('figure.preview pre.hex').innerText()).toContain('89 50 4e 47');
  });

  it('shows the outbox dead letter and redrives it', async () => {
    await page.click('#tabs a[data-tab=outbox]');
    const dead = page.locator('tr.row-dead');
    await dead.first().waitFor();
    expect(await dead.count()).toBe(1);
    const row = await dead.innerText();
    expect(row).toContain('payment.refunded');
    expect(row).toContain('broker refused: message too large');
    await dead.locator('details summary').click();
    expect(await dead.locator('table.kv').innerText()).toMatch(/authorization\s+\[redacted\]/);
    expect(await dead.locator('pre').innerText()).toContain('<script>window.__xss = 1</script>');
    await dead.locator('details summary').click();
    await shoot('outbox');

    await page.click(`button[data-redrive="${data.deadEventId}"]`);
    const flash = page.locator('.flash-ok');
    await flash.waitFor();
    expect(await flash.innerText()).toContain('1 revived, 1 released');
    expect(await page.locator('tr.row-dead').count()).toBe(0);
    expect(await page.locator('text=No dead letters.').count()).toBe(1);
    const { rows: stored } = await db.pool.query(
      `SELECT dead_at, attempts FROM "${db.schema}".outbox WHERE id = $1`,
      [data.deadEventId],
    );
    expect(stored).toEqual([{ dead_at: null, attempts: 0 }]);
    await expect.poll(() => counter('outbox-dead').innerText(), { timeout: 10_000 }).toBe('0');
  });

  it('shows the dead inbox message', async () => {
    await page.click('#tabs a[data-tab=inbox]');
    const dead = page.locator('tr.row-dead');
    await dead.first().waitFor();
    const text = await dead.innerText();
    expect(text).toContain('evt_9');
    expect(text).toContain('TypeError: account is undefined');
    await dead.locator('details summary').click();
    expect(await dead.locator('table.kv').innerText()).toMatch(/authorization\s+\[redacted\]/);
    expect(await page.content()).not.toContain('sk_live_never_shown');
    await shoot('inbox');
  });

  it('shows dead and superseded webhook receipts and the parked entity', async () => {
    await page.click('#tabs a[data-tab=webhooks]');
    await page.locator('#receipts-dead').waitFor();
    const dead = await page.locator('tr.row-dead').first().innerText();
    expect(dead).toContain('msg_dispute');
    expect(dead).toContain('ledger account 7 is closed');
    const superseded = page.locator('tr.row-muted');
    expect(await superseded.count()).toBe(1);
    expect(await superseded.innerText()).toMatch(/msg_refund_v1[\s\S]*charge\/ch_c0\s+1\s+2/);
    const parked = await page.locator('#entities-parked').locator('xpath=ancestor::section').innerText();
    expect(parked).toMatch(/balance\/acct_9\s+1\s+2\s+1\s+3/);
    expect(parked).toContain('version 2 has not arrived');
    await shoot('webhooks');
  });

  it('shows the stuck claim and the dead task', async () => {
    await page.click('#tabs a[data-tab=tasks]');
    await page.locator('#tasks-dead').waitFor();
    const stuck = await page.locator('tr.row-stuck').innerText();
    expect(stuck).toContain(`#${data.stuckTaskId}`);
    expect(stuck).toContain('receipt:pay_c1');
    const dead = await page.locator('tr.row-dead').innerText();
    expect(dead).toContain(`#${data.deadTaskId}`);
    expect(dead).toContain('PDF renderer: font missing');
    await shoot('claims');
  });

  it('shows the stuck saga with its steps', async () => {
    await page.click('#tabs a[data-tab=sagas]');
    await page.locator('#sagas-stuck').waitFor();
    const card = page.locator('article.item-stuck');
    expect(await card.count()).toBe(1);
    expect(await card.locator('.item-head').innerText()).toMatch(/stuck\s+acme \/ ship-order \/ order-77/);
    expect(await card.locator('.item-error').innerText()).toContain('warehouse API 503');
    expect(await card.locator('.item-cause').innerText()).toContain('card expired');
    const steps = await card.locator('table.grid > tbody > tr').allInnerTexts();
    expect(steps.map((row) => row.split('\t').slice(0, 4).join(' '))).toEqual([
      '0 reserve-stock done 2',
      '1 charge-card compensated 0',
    ]);
    await shoot('sagas');
  });

  it('raised no script errors on any view', () => {
    expect(pageErrors).toEqual([]);
  });
});
