/**
 * Lambda reaches PostgreSQL through a transaction-mode pooler (RDS Proxy, PgBouncer): the drills
 * of the direct tests again, through a real PgBouncer in transaction mode with fewer server
 * connections than clients, idem's adapter set to `prepare: false`. Effects are counted directly.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { idempotency } from 'idem/lambda';
import { databaseUrl } from '../support/database.js';
import {
  apiGatewayV2Event,
  createLambdaHarness,
  createOrder,
  httpDrills,
  mountings,
  sqsBatchDrills,
  type LambdaHarness,
} from '../support/lambda.js';
import { requirePgBouncer, startPgBouncer, type PgBouncer } from '../support/pgbouncer.js';

const binary = requirePgBouncer();

describe.skipIf(!binary)('idem/lambda through PgBouncer in transaction mode (prepare: false)', () => {
  let bouncer: PgBouncer;
  let h: LambdaHarness;

  beforeAll(async () => {
    // Three server connections for ten clients: consecutive transactions land on any of them.
    bouncer = await startPgBouncer(binary!, { targetUrl: databaseUrl(), poolSize: 3 });
    h = await createLambdaHarness({ url: bouncer.url, poolSize: 10 });
  });
  afterAll(async () => {
    await h?.close();
    await bouncer?.stop();
  });

  it.each(Object.keys(mountings) as (keyof typeof mountings)[])(
    'API Gateway v2 as %s: one row per key, the same response replayed, 422, one row of 20 concurrent',
    async (mounting) => {
      const handler = mountings[mounting](idempotency({ idem: h.idem, singleTenant: true }), createOrder(h));
      await httpDrills(h, handler, apiGatewayV2Event, `bouncer-${mounting}`);
    },
  );

  it('an SQS batch: 7 effects, only the failing message named; redelivered: nothing new', async () => {
    await sqsBatchDrills(h, 'bouncer');
  });
});
