/**
 * Who may use the console: loopback by default, a token on every route when bound anywhere else
 * (whatever the caller's address or Host header claims), no start at all beyond loopback without a
 * token, and no cross-site mutation.
 */
import { networkInterfaces } from 'node:os';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { run } from '../../src/cli/commands/console.js';
import { consolePlugin } from '../../src/console/plugin.js';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { startConsole, type ConsoleServer } from './support.js';

const token = 'ops-token-0123456789abcdef';

/** A non-loopback address of this machine, to call a 0.0.0.0-bound console from "outside". */
function externalAddress(): string | undefined {
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (!a.internal && a.family === 'IPv4') return a.address;
  }
  return undefined;
}

/** Raw requests, so the Host header can be anything (fetch refuses to set it). */
async function call(
  port: number,
  path: string,
  options: {
    host?: string;
    address?: string;
    headers?: Record<string, string>;
    method?: string;
    body?: string;
  } = {},
): Promise<{ status: number; headers: Headers; text: string }> {
  const { request } = await import('undici');
  const address = options.address ?? '127.0.0.1';
  const res = await request(`http://${address}:${port}${path}`, {
    method: (options.method ?? 'GET') as 'GET',
    headers: { host: options.host ?? `${address}:${port}`, ...options.headers },
    body: options.body,
  });
  const text = await res.body.text();
  const headers = new Headers();
  for (const [k, v] of Object.entries(res.headers))
    if (v !== undefined) headers.set(k, [v].flat().join(', '));
  return { status: res.statusCode, headers, text };
}

describe('console access', () => {
  let db: TestSchema;

  beforeAll(async () => {
    db = await createTestSchema({ poolSize: 4 });
  });
  afterAll(async () => {
    await db?.close();
  });

  describe('bound to loopback without a token', () => {
    let server: ConsoleServer;
    beforeAll(async () => {
      server = await startConsole({ pool: db.pool, schema: db.schema, host: '127.0.0.1' });
    });
    afterAll(() => server?.close());

    it('serves the page and the API to loopback callers', async () => {
      const page = await call(server.port, '/console');
      expect(page.status).toBe(200);
      expect(page.headers.get('content-type')).toContain('text/html');
      expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
      expect(page.headers.get('x-frame-options')).toBe('DENY');
      expect(page.headers.get('referrer-policy')).toBe('no-referrer');
      expect((await call(server.port, '/console/api/summary')).status).toBe(200);
      expect(
        (await call(server.port, '/console/api/summary', { host: `localhost:${server.port}` })).status,
      ).toBe(200);
      expect((await call(server.port, '/console/api/summary', { host: `[::1]:${server.port}` })).status).toBe(
        200,
      );
    });

    it('refuses a Host header that is not loopback (DNS rebinding)', async () => {
      for (const host of [`evil.example:${server.port}`, 'evil.example', `192.0.2.99:${server.port}`, '']) {
        const res = await call(server.port, '/console/api/summary', { host });
        expect(res.status, host).toBe(403);
        expect(res.text).not.toContain('requests');
      }
      expect((await call(server.port, '/console', { host: 'attacker.localhost.evil.example' })).status).toBe(
        403,
      );
    });

    it('refuses cross-site mutations', async () => {
      const redrive = (headers: Record<string, string>) =>
        call(server.port, '/console/api/outbox/redrive', {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body: JSON.stringify({ all: true }),
        });
      expect((await redrive({})).status).toBe(403); // no custom header
      expect((await redrive({ 'x-idem-console': '1', origin: 'http://evil.example' })).status).toBe(403);
      expect((await redrive({ 'x-idem-console': '1', 'sec-fetch-site': 'cross-site' })).status).toBe(403);
      expect(
        (
          await call(server.port, '/console/api/outbox/redrive', {
            method: 'POST',
            headers: { 'content-type': 'text/plain', 'x-idem-console': '1' },
            body: '{"all":true}',
          })
        ).status,
      ).toBe(403);
      const ok = await redrive({ 'x-idem-console': '1', origin: `http://127.0.0.1:${server.port}` });
      expect(ok.status).toBe(200);
      expect(JSON.parse(ok.text)).toEqual({ revived: 0, released: 0 });
    });
  });

  describe('bound to 0.0.0.0 with a token', () => {
    let server: ConsoleServer;
    beforeAll(async () => {
      server = await startConsole({ pool: db.pool, schema: db.schema, host: '0.0.0.0', token });
    });
    afterAll(() => server?.close());

    const routes = [
      '/console',
      '/console/assets/console.js',
      '/console/api/summary',
      '/console/api/requests',
      '/console/api/live',
    ];

    it('requires the token on every route, even from 127.0.0.1 with Host: localhost', async () => {
      for (const path of routes) {
        for (const host of [undefined, `localhost:${server.port}`, `127.0.0.1:${server.port}`]) {
          const res = await call(server.port, path, host ? { host } : {});
          expect(res.status, `${path} ${host}`).toBe(401);
          expect(res.headers.get('www-authenticate')).toContain('Bearer');
        }
      }
      const post = await call(server.port, '/console/api/outbox/redrive', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-idem-console': '1' },
        body: '{"all":true}',
      });
      expect(post.status).toBe(401);
    });

    it('refuses a wrong token and accepts the right one as a bearer token', async () => {
      for (const authorization of [
        `Bearer ${token}x`,
        `Bearer ${token.slice(0, -1)}`,
        token,
        `Basic ${token}`,
      ]) {
        expect((await call(server.port, '/console/api/summary', { headers: { authorization } })).status).toBe(
          401,
        );
      }
      const ok = await call(server.port, '/console/api/summary', {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(ok.status).toBe(200);
      expect(JSON.parse(ok.text)).toHaveProperty('requests');
    });

    it('turns ?token= into an HttpOnly cookie and takes it out of the address', async () => {
      const wrong = await call(server.port, `/console?token=${token}x`);
      expect(wrong.status).toBe(401);
      expect(wrong.headers.get('set-cookie')).toBeNull();
      const first = await call(server.port, `/console?token=${token}`);
      expect(first.status).toBe(303);
      expect(first.headers.get('location')).toBe('/console');
      const cookie = first.headers.get('set-cookie')!;
      expect(cookie).toMatch(
        /^idem_console=[A-Za-z0-9_-]+; Path=\/console; HttpOnly; SameSite=Strict; Max-Age=\d+$/,
      );
      expect(cookie).not.toContain(token);
      const pair = cookie.split(';')[0]!;
      expect((await call(server.port, '/console', { headers: { cookie: pair } })).status).toBe(200);
      expect((await call(server.port, '/console/api/requests', { headers: { cookie: pair } })).status).toBe(
        200,
      );
      expect(
        (await call(server.port, '/console/api/requests', { headers: { cookie: `${pair}x` } })).status,
      ).toBe(401);
      // A cookie still needs the CSRF header for a mutation.
      const post = (headers: Record<string, string>) =>
        call(server.port, '/console/api/outbox/redrive', {
          method: 'POST',
          headers: { 'content-type': 'application/json', cookie: pair, ...headers },
          body: '{"all":true}',
        });
      expect((await post({})).status).toBe(403);
      expect((await post({ 'x-idem-console': '1' })).status).toBe(200);
    });

    const external = externalAddress();
    it.skipIf(!external)(
      `checks callers on a non-loopback address too (${external ?? 'none on this machine'})`,
      async () => {
        expect((await call(server.port, '/console/api/summary', { address: external! })).status).toBe(401);
        expect(
          (
            await call(server.port, '/console/api/summary', {
              address: external!,
              headers: { authorization: `Bearer ${token}` },
            })
          ).status,
        ).toBe(200);
        // Exposed: the Host header may name the machine (or a proxy); the token is what counts.
        expect(
          (
            await call(server.port, '/console/api/summary', {
              address: external!,
              host: 'console.internal.example',
              headers: { authorization: `Bearer ${token}` },
            })
          ).status,
        ).toBe(200);
      },
    );
  });

  it('refuses to start beyond loopback without a token, or with a short one', async () => {
    for (const host of ['0.0.0.0', '::', '192.0.2.2', 'console.example']) {
      const app = Fastify();
      await expect(app.register(consolePlugin, { pool: db.pool, schema: db.schema, host })).rejects.toThrow(
        /refuses to serve .* without a token/,
      );
      await app.close().catch(() => undefined);
    }
    const app = Fastify();
    await expect(
      app.register(consolePlugin, { pool: db.pool, schema: db.schema, host: '0.0.0.0', token: 'short' }),
    ).rejects.toThrow(/at least 16 characters/);
    await app.close().catch(() => undefined);
  });

  it('checks the address the server really listens on, not only the declared host', async () => {
    // Declared loopback, actually listening on every interface, no token: nothing is served.
    const server = await startConsole({
      pool: db.pool,
      schema: db.schema,
      host: '127.0.0.1',
      listenHost: '0.0.0.0',
    });
    try {
      const res = await call(server.port, '/console/api/summary');
      expect(res.status).toBe(403);
      expect(res.text).toContain('beyond loopback');
      expect((await call(server.port, '/console')).status).toBe(403);
    } finally {
      await server.close();
    }
  });

  it('requires a configured token on loopback too', async () => {
    const server = await startConsole({ pool: db.pool, schema: db.schema, host: '127.0.0.1', token });
    try {
      expect((await call(server.port, '/console/api/summary')).status).toBe(401);
      expect(
        (await call(server.port, '/console/api/summary', { headers: { authorization: `Bearer ${token}` } }))
          .status,
      ).toBe(200);
    } finally {
      await server.close();
    }
  });

  describe('idem console', () => {
    it('refuses to bind beyond loopback without CONSOLE_TOKEN, before touching the database', async () => {
      const saved = { token: process.env.CONSOLE_TOKEN, url: process.env.DATABASE_URL };
      delete process.env.CONSOLE_TOKEN;
      process.env.DATABASE_URL = 'postgres://nobody@127.0.0.1:1/none';
      const errors = vi.spyOn(console, 'error').mockImplementation(() => undefined);
      try {
        expect(await run(['--host', '0.0.0.0', '--port', '0'])).toBe(2);
        expect(errors.mock.calls.flat().join(' ')).toMatch(/refuses to serve on 0\.0\.0\.0 without a token/);
        expect(await run(['--port', 'x'])).toBe(2);
      } finally {
        errors.mockRestore();
        restore(saved);
      }
    });

    it('serves the console for DATABASE_URL on loopback until stopped', async () => {
      const saved = { token: process.env.CONSOLE_TOKEN, url: process.env.DATABASE_URL };
      delete process.env.CONSOLE_TOKEN;
      process.env.DATABASE_URL = databaseUrl();
      const lines: string[] = [];
      const log = vi.spyOn(console, 'log').mockImplementation((line: string) => void lines.push(line));
      const stop = new AbortController();
      try {
        const exit = run(['--port', '0', '--schema', db.schema], stop.signal);
        await vi.waitFor(
          () => expect(lines.join('\n')).toMatch(/idem console on http:\/\/127\.0\.0\.1:\d+\/console/),
          {
            timeout: 10_000,
          },
        );
        const url = /(http:\/\/\S+\/console)/.exec(lines.join('\n'))![1]!;
        const res = await fetch(`${url}/api/summary`);
        expect(res.status).toBe(200);
        expect(await res.json()).toMatchObject({ requests: { pending: 0, stuck: 0 } });
        stop.abort();
        expect(await exit).toBe(0);
      } finally {
        log.mockRestore();
        restore(saved);
      }
    });
  });
});

function restore(saved: { token: string | undefined; url: string | undefined }): void {
  if (saved.token === undefined) delete process.env.CONSOLE_TOKEN;
  else process.env.CONSOLE_TOKEN = saved.token;
  if (saved.url === undefined) delete process.env.DATABASE_URL;
  else process.env.DATABASE_URL = saved.url;
}
