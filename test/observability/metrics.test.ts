import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createEvents, createIdem, type OperationEvent, refused } from 'idem';
import { createIdemMetrics } from 'idem/metrics';
import { createTestSchema, type TestSchema } from '../support/database.js';

describe('operation events and Prometheus metrics', () => {
  let db: TestSchema;
  beforeAll(async () => {
    db = await createTestSchema();
  });
  afterAll(() => db.close());

  it('reports every outcome once, and exports counters and table gauges', async () => {
    const channel = createEvents();
    const events: OperationEvent[] = [];
    channel.on('operation', (e) => events.push(e));
    const metrics = createIdemMetrics({ sql: fromPg(db.pool), schema: db.schema, events: channel });
    const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, events: channel });
    const spec = { tenant: 'acme', operation: 'pay', key: 'm-1', request: { a: 1 } };
    await idem.run(spec, async () => 'ok');
    await idem.run(spec, async () => 'ok');
    await idem.run({ ...spec, request: { a: 2 } }, async () => 'ok').catch(() => undefined);
    await idem.run({ ...spec, key: 'm-2' }, async () => refused('declined'));
    await idem.run({ ...spec, key: 'm-3' }, () => Promise.reject(new Error('boom'))).catch(() => undefined);
    expect(events.map((e) => e.kind)).toEqual(['executed', 'replayed', 'key-reused', 'refused', 'failed']);
    expect(events.every((e) => e.tenant === 'acme' && e.operation === 'pay' && e.durationMs >= 0)).toBe(true);
    expect(events[4]!.retryable).toBe(false);

    // The other modules' events, as the receiver, an inbox and the completer emit them.
    channel.emit('webhook:rejected', {
      source: 'billing',
      reason: 'signature',
      status: 401,
      code: 'IDEM_WEBHOOK_UNAUTHORIZED',
      message: 'signature mismatch',
    });
    channel.emit('inbox:duplicate', { consumer: 'ledger', tenant: 'acme', messageId: 'm-1' });
    const text = await metrics.render();
    expect(text).toContain('idem_operations_total{operation="pay",outcome="replayed"} 1');
    expect(text).toContain('idem_operations_total{operation="pay",outcome="key-reused"} 1');
    expect(text).toContain('idem_webhook_rejections_total{reason="signature"} 1');
    expect(text).toContain('idem_inbox_duplicates_total{consumer="ledger"} 1');
    expect(text).toMatch(/idem_outbox_backlog 0/);
    expect(text).toMatch(/idem_requests_stuck 0/);
  });
});

describe('the event channel', () => {
  it('calls listeners in order, survives a listener that throws, and unsubscribes', () => {
    const events = createEvents();
    const seen: string[] = [];
    const stop = events.on('error', (e) => seen.push(`a:${e.where}`));
    events.on('error', () => {
      throw new Error('a broken listener');
    });
    events.on('error', (e) => seen.push(`c:${e.where}`));
    events.emit('error', { source: 'test', where: 'one', error: new Error('x') });
    stop();
    events.emit('error', { source: 'test', where: 'two', error: new Error('x') });
    expect(seen).toEqual(['a:one', 'c:one', 'c:two']);
    expect(events.has('error')).toBe(true);
    expect(events.has('operation')).toBe(false);
  });

  it('writes an error nobody listens to on stderr, one line, and stays silent for other events', () => {
    const events = createEvents();
    const lines: unknown[][] = [];
    const original = console.error;
    console.error = (...args: unknown[]) => void lines.push(args);
    try {
      events.emit('error', {
        source: 'dispatcher',
        where: 'publish',
        error: Object.assign(new Error('broker down'), { code: 'ECONNREFUSED' }),
      });
      events.emit('operation', { kind: 'executed', tenant: 't', operation: 'o', durationMs: 1 });
    } finally {
      console.error = original;
    }
    expect(lines).toHaveLength(1);
    expect(String(lines[0]![0])).toContain('[idem dispatcher] publish: broker down (ECONNREFUSED)');
  });

  it('metrics.subscribe counts a channel given later, and its stop function ends the counting', async () => {
    const events = createEvents();
    const metrics = createIdemMetrics();
    const stop = metrics.subscribe(events);
    events.emit('inbox:duplicate', { consumer: 'ledger', tenant: 'acme', messageId: 'm-1' });
    stop();
    events.emit('inbox:duplicate', { consumer: 'ledger', tenant: 'acme', messageId: 'm-2' });
    expect(await metrics.render()).toContain('idem_inbox_duplicates_total{consumer="ledger"} 1');
  });
});
