/**
 * The HTTP layout: a real Express server on 127.0.0.1 and an undici client pool in the same
 * process, so every HTTP variant pays the same parsing, socket and event-loop costs.
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import { Pool } from 'undici';
import type { OrderPayload } from './business.js';
import type { Answer, RunningVariant } from './variant.js';

/** Builds an Express app with `express.json()` and the variant's route on `POST /orders`. */
export function orderApp(route: (app: Express) => void): Express {
  const app = express();
  app.use(express.json());
  route(app);
  app.use(answerError);
  return app;
}

/**
 * Answers an error with its status (or the one a middleware set, e.g. express-idempotency's 409)
 * without Express's default stack trace on stderr: the drills fail requests on purpose.
 */
function answerError(error: unknown, _req: Request, res: Response, _next: NextFunction): void {
  const declared =
    (error as { status?: unknown; statusCode?: unknown }).status ??
    (error as { statusCode?: unknown }).statusCode;
  const status = typeof declared === 'number' ? declared : res.statusCode >= 400 ? res.statusCode : 500;
  if (!res.headersSent) res.status(status).json({ error: (error as Error).message });
}

/** Serves `app` on an ephemeral port and returns a client for `POST /orders`. */
export async function serve(app: Express, connections = 32): Promise<RunningVariant> {
  const server: Server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const client = new Pool(`http://127.0.0.1:${port}`, { connections, pipelining: 1 });
  return {
    async call(key: string, payload: OrderPayload): Promise<Answer> {
      try {
        const response = await client.request({
          method: 'POST',
          path: '/orders',
          headers: { 'content-type': 'application/json', 'idempotency-key': key },
          body: JSON.stringify(payload),
        });
        await response.body.text();
        const ok = response.statusCode >= 200 && response.statusCode < 300;
        return { ok, status: String(response.statusCode) };
      } catch (error) {
        return { ok: false, status: (error as { code?: string }).code ?? 'network-error' };
      }
    },
    async close() {
      await client.close();
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}

/** The client's key, read back by the plain route (which has no idempotency layer to give it one). */
export const requestKey = (header: string | string[] | undefined): string =>
  Array.isArray(header) ? (header[0] ?? '') : (header ?? '');
