/**
 * A request whose process dies between steps (SIGKILL, in a child process serving the same app on
 * the same database) is resumed by the client's retry against another process, once the dead
 * holder's lease lapses: the recorded step is not repeated, the interrupted one runs with the same
 * derived key, and the provider sees one effect per step.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deriveKey } from 'idem';
import { databaseUrl } from '../support/database.js';
import { frameworks, type RunningApp } from '../support/http/apps.js';
import { client } from '../support/http/client.js';
import { createHarness, type Harness } from '../support/http/harness.js';

const fixture = fileURLToPath(new URL('./fixtures/crash-server.ts', import.meta.url));

describe.each(frameworks)('crash between steps on $name', (framework) => {
  let h: Harness;
  let app: RunningApp;

  beforeAll(async () => {
    h = await createHarness();
    app = await framework.start(h);
  });
  afterAll(async () => {
    await app?.close();
    await h?.close();
  });

  it('the retry takes over the killed request, skips its recorded step and reuses the derived key', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', fixture], {
      env: {
        ...process.env,
        DATABASE_URL: databaseUrl(),
        SCHEMA: h.schema,
        PROVIDER_URL: h.provider.url,
        FRAMEWORK: framework.name,
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise<string | null>((resolve) =>
      child.on('close', (_code, signal) => resolve(signal)),
    );
    const childUrl = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => resolve(chunk.toString().trim().split('\n')[0]!));
      child.on('error', reject);
      setTimeout(() => reject(new Error('the child server did not start')), 20_000);
    });

    const key = `crash-${framework.name}-${randomBytes(4).toString('hex')}`;
    const body = { amount: 12 };
    await expect(
      client(childUrl)('/checkout', { key, body, headers: { 'x-test-gate': 'crash' } }),
    ).rejects.toThrow();
    expect(await exited).toBe('SIGKILL');

    const scope = { tenant: 'acme', operation: 'POST /checkout', key };
    const row = await h.idem.get(scope);
    expect(row).toMatchObject({ state: 'pending', recoveryPoint: 'reserve' });

    h.clock.advance(31_000); // the dead holder's 30 s lease lapses
    const send = client(app.url);
    const retry = await send('/checkout', { key, body });
    expect(retry.status).toBe(201);
    expect(retry.json()).toMatchObject({ resumed: true, amount: 12 });

    const mine = h.provider.calls.filter(
      (c) => c.key === deriveKey(scope, 'reserve') || c.key === deriveKey(scope, 'charge'),
    );
    expect(mine.map((c) => c.path)).toEqual(['/reserve', '/charge']); // reserve by the dead process only
    expect(h.runs.get(`acme:${key}`)).toBe(1); // this process ran it once (the child's run died with it)
    const again = await send('/checkout', { key, body });
    expect(again.replayed).toBe(true);
    expect(again.bytes.equals(retry.bytes)).toBe(true);
  });
});
