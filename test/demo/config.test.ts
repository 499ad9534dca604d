/**
 * The demo's default webhook secret (printed in docs/guide/demo.md) is accepted on loopback only: on any
 * other HOST the demo refuses to start, before it touches a database or a port, and says why.
 */
import { describe, expect, it } from 'vitest';
import { checkWebhookSecret, demoWebhookSecret, readConfig } from '../../demo/config.js';
import { startDemo } from '../../demo/server.js';

describe('the default webhook secret', () => {
  it('is the default when PROVIDER_WEBHOOK_SECRET is unset, and accepted on loopback hosts', () => {
    expect(readConfig({}).webhookSecret).toBe(demoWebhookSecret);
    for (const host of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]']) {
      expect(() => checkWebhookSecret({ host, webhookSecret: demoWebhookSecret })).not.toThrow();
    }
  });

  it('is refused on a non-loopback HOST, with a message that says what to set', () => {
    for (const host of ['0.0.0.0', '::', '192.0.2.10', 'demo.example']) {
      expect(() => checkWebhookSecret({ host, webhookSecret: demoWebhookSecret })).toThrow(
        /HOST=.* is not a loopback address and PROVIDER_WEBHOOK_SECRET is unset.*Set PROVIDER_WEBHOOK_SECRET/,
      );
    }
    const own = 'whsec_' + Buffer.from('a-secret-of-this-deployment-only').toString('base64');
    expect(() => checkWebhookSecret({ host: '0.0.0.0', webhookSecret: own })).not.toThrow();
    expect(readConfig({ PROVIDER_WEBHOOK_SECRET: own, HOST: '0.0.0.0' }).webhookSecret).toBe(own);
  });

  it('startDemo refuses before starting anything', async () => {
    // No database URL: were the check not first, this would start an embedded PostgreSQL.
    await expect(
      startDemo({ host: '0.0.0.0', webhookSecret: demoWebhookSecret, databaseUrl: undefined }),
    ).rejects.toMatchObject({ code: 'IDEM_INVALID_ARGUMENT' });
  });
});
