/**
 * Spans: with a tracer provider registered, every keyed call is one span named after the call,
 * with the tenant, the operation and the outcome; without one, idem makes no span at all (it skips
 * the no-op span's cost) and still reports `operation` events.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { trace, type Span, type SpanOptions, type Tracer } from '@opentelemetry/api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createEvents, createIdem, type Idem, isKeyReused, migrate, type OperationEvent } from 'idem';
import { databaseUrl } from '../support/database.js';

interface Recorded {
  name: string;
  attributes: Record<string, unknown>;
  status?: unknown;
  ended: boolean;
}

/** A tracer that records what it is given: the smallest provider a test can register. */
function recordingTracer(spans: Recorded[]): Tracer {
  const start = (name: string, options: SpanOptions = {}): Span => {
    const recorded: Recorded = { name, attributes: { ...options.attributes }, ended: false };
    spans.push(recorded);
    const span = {
      setAttribute(key: string, value: unknown) {
        recorded.attributes[key] = value;
        return span;
      },
      setStatus(status: unknown) {
        recorded.status = status;
        return span;
      },
      end() {
        recorded.ended = true;
      },
    };
    return span as unknown as Span;
  };
  return {
    startSpan: start,
    startActiveSpan(name: string, ...rest: unknown[]) {
      const fn = rest.at(-1) as (span: Span) => unknown;
      const options = (rest.length > 1 ? rest[0] : {}) as SpanOptions;
      return fn(start(name, options));
    },
  };
}

describe('tracing', () => {
  const schema = `idem_trace_${randomBytes(4).toString('hex')}`;
  let pool: pg.Pool;
  let idem: Idem;
  const events: OperationEvent[] = [];
  const spans: Recorded[] = [];
  const spec = (key: string, request: unknown = { n: 1 }) => ({
    tenant: 'acme',
    operation: 'pay',
    key,
    request,
  });

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: databaseUrl(), max: 2 });
    await migrate(fromPg(pool), { schema });
    const channel = createEvents();
    channel.on('operation', (event) => events.push(event));
    idem = createIdem({ sql: fromPg(pool), schema, events: channel });
  });
  afterAll(async () => {
    trace.disable();
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it('without a provider: no span, the observer still hears every outcome', async () => {
    await idem.run(spec('a'), async () => 1);
    await idem.run(spec('a'), async () => 1);
    expect(await idem.run(spec('a', { n: 2 }), async () => 1).catch((e: unknown) => isKeyReused(e))).toBe(
      true,
    );
    expect(spans).toHaveLength(0);
    expect(events.map((e) => e.kind)).toEqual(['executed', 'replayed', 'key-reused']);
  });

  it('with a provider registered later: one span per call, named, with its outcome, ended', async () => {
    expect(trace.setGlobalTracerProvider({ getTracer: () => recordingTracer(spans) })).toBe(true);
    await idem.run(spec('b'), async () => 1);
    await idem.run(spec('b'), async () => 1);
    await idem
      .run(spec('c'), async () => {
        throw new Error('declined');
      })
      .catch(() => undefined);
    expect(spans.map((s) => [s.name, s.attributes['idem.outcome'], s.ended])).toEqual([
      ['idem.run', 'executed', true],
      ['idem.run', 'replayed', true],
      ['idem.run', 'failed', true],
    ]);
    expect(spans[0]!.attributes).toMatchObject({ 'idem.tenant': 'acme', 'idem.operation': 'pay' });
    expect(spans[2]!.status).toMatchObject({ message: 'IDEM_OPERATION_FAILED' });
  });
});
