/**
 * The duplicate-effect drills of the peers benchmark, small enough for CI: the report's claim that
 * idem shows no duplicate effect is checked on every run. The plain handler is the control: its
 * counts prove each drill really overlaps the requests, really writes before failing, really
 * crashes after the write.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrencyDrill, crashDrill, failureDrill } from '../../bench/peers/drills.js';
import { createPeerEnvironment, type PeerEnvironment } from '../../bench/peers/environment.js';
import { variantById, variants } from '../../bench/peers/variants/index.js';
import { databaseUrl } from '../support/database.js';
import { recordings } from '../support/recordings.js';
import { serviceUrl } from '../support/services.js';

const redisUrl = serviceUrl('REDIS_URL');
const idemVariants = ['idem', 'express-idem'].map(variantById);
const controls = ['plain', 'express-plain'].map(variantById);

describe.skipIf(!redisUrl).each(recordings)('peer drills, idem recording at %s', (recording) => {
  let env: PeerEnvironment;
  beforeAll(async () => {
    env = await createPeerEnvironment({ databaseUrl: databaseUrl(), redisUrl, poolSize: 12, recording });
  });
  afterAll(() => env?.close());

  it.each(variants)(
    '20 concurrent identical requests to $label: the effects are counted',
    async (variant) => {
      const result = await concurrencyDrill(env, variant, { requests: 20 });
      if (controls.includes(variant)) expect(result.rows).toBe(20);
      else if (idemVariants.includes(variant)) expect(result.rows).toBe(1);
      else expect(result.rows).toBeGreaterThanOrEqual(1); // a peer may duplicate, but must not lose it
      expect(Object.values(result.answers).reduce((a, b) => a + b, 0)).toBe(20);
    },
  );

  it.each(idemVariants)(
    '$label shows no duplicate over two instances sharing the database',
    async (variant) => {
      const result = await concurrencyDrill(env, variant, { requests: 20, instances: 2 });
      expect(result.rows).toBe(1);
    },
  );

  it('a request that fails after its write: idem keeps one effect, the plain handler gets two', async () => {
    const results = await Promise.all(
      [...controls, ...idemVariants].map((v) => failureDrill(env, v, 'after-write')),
    );
    expect(Object.fromEntries(results.map((r) => [r.variant.id, [r.rows, r.final?.ok]]))).toEqual({
      plain: [2, true],
      'express-plain': [2, true],
      idem: [1, true],
      'express-idem': [1, true],
    });
  });

  it('a process killed after the write: idem keeps one effect, the plain handler gets two', async () => {
    const results = await crashDrill(env, [...controls, ...idemVariants]);
    expect(Object.fromEntries(results.map((r) => [r.variant.id, [r.rows, r.final?.ok]]))).toEqual({
      plain: [2, true],
      'express-plain': [2, true],
      idem: [1, true],
      'express-idem': [1, true],
    });
  });
});
