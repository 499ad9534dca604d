import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import type { OperationEvent } from '../../src/observability/events.js';
import { createIdemMetrics } from '../../src/observability/prometheus.js';
import { createIdem } from '../../src/operations/idem.js';
import { refused } from '../../src/operations/outcome.js';
import { createTestSchema, type TestSchema } from '../support/database.js';

describe('operation events and Prometheus metrics', () => {
  let db: TestSchema;
  beforeAll(async () => {
    db = await createTestSchema();
  });
  afterAll(() => db.close());

  it('reports every outcome once, and exports counters and table gauges', async () => {
    const events: OperationEvent[] = [];
    const metrics = createIdemMetrics({ sql: fromPg(db.pool), schema: db.schema });
    const idem = createIdem({
      sql: fromPg(db.pool),
      schema: db.schema,
      onEvent: (e) => {
        events.push(e);
        metrics.onOperation(e);
      },
    });
    const spec = { tenant: 'acme', operation: 'pay', key: 'm-1', request: { a: 1 } };
    await idem.run(spec, async () => 'ok');
    await idem.run(spec, async () => 'ok');
    await idem.run({ ...spec, request: { a: 2 } }, async () => 'ok').catch(() => undefined);
    await idem.run({ ...spec, key: 'm-2' }, async () => refused('declined'));
    await idem.run({ ...spec, key: 'm-3' }, () => Promise.reject(new Error('boom'))).catch(() => undefined);
    expect(events.map((e) => e.kind)).toEqual(['executed', 'replayed', 'key-reused', 'refused', 'failed']);
    expect(events.every((e) => e.tenant === 'acme' && e.operation === 'pay' && e.durationMs >= 0)).toBe(true);
    expect(events[4]!.retryable).toBe(false);

    metrics.webhookRejected('signature');
    const text = await metrics.render();
    expect(text).toContain('idem_operations_total{operation="pay",outcome="replayed"} 1');
    expect(text).toContain('idem_operations_total{operation="pay",outcome="key-reused"} 1');
    expect(text).toContain('idem_webhook_rejections_total{reason="signature"} 1');
    expect(text).toMatch(/idem_outbox_backlog 0/);
    expect(text).toMatch(/idem_requests_stuck 0/);
  });
});
