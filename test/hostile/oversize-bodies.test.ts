/**
 * A body over the limit, sent chunked (no Content-Length) and written in one go, is answered 413
 * in a way the sender can read, every time, on every surface: the idempotency middleware and the
 * webhook receiver read bodies the same way (src/core/read-stream.ts). A reader that tore the
 * connection down with the body unread left the sender a reset instead of the answer (a webhook
 * provider that meets a reset retries the oversize delivery for days instead of seeing a 413).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHostileDemo, type HostileDemo } from '../support/hostile/demo.js';
import { connect } from 'node:net';
import { startSurfaces, type Surfaces } from '../support/hostile/servers.js';

/** A chunked body of `size` bytes, in chunks of 16 KiB, written with its head in one write. */
function chunked(size: number): Buffer {
  const parts: Buffer[] = [];
  const chunk = Buffer.alloc(16 * 1024, 'x');
  for (let left = size; left > 0; left -= chunk.length) {
    const piece = left >= chunk.length ? chunk : chunk.subarray(0, left);
    parts.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from('0\r\n\r\n'));
  return Buffer.concat(parts);
}

/**
 * Sends the head and the first 64 KiB of the body at once, then the rest as the socket takes it
 * (as a sender that streams its body does), until the body is sent or the server closed. Resolves
 * with the answer's status, or 0 when the connection was reset before an answer could be read.
 */
function sendStreaming(port: number, head: string[], body: Buffer): Promise<{ status: number }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const received: Buffer[] = [];
    let closed = false;
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      closed = true;
      const status = Number(
        /^HTTP\/1\.[01] (\d{3})/.exec(Buffer.concat(received).toString('latin1'))?.[1] ?? 0,
      );
      resolve({ status });
    });
    socket.write(
      Buffer.concat([Buffer.from(head.join('\r\n') + '\r\n\r\n', 'latin1'), body.subarray(0, 64 * 1024)]),
    );
    let offset = 64 * 1024;
    const more = () => {
      while (!closed && offset < body.length) {
        const next = body.subarray(offset, offset + 16 * 1024);
        offset += next.length;
        if (!socket.write(next)) return void socket.once('drain', more);
      }
    };
    setImmediate(more);
  });
}

describe('an oversize chunked body, streamed', () => {
  let s: Surfaces;
  let demo: HostileDemo;
  beforeAll(async () => {
    [s, demo] = await Promise.all([startSurfaces(), startHostileDemo()]);
  });
  afterAll(() => Promise.all([s.close(), demo.close()]));

  const surfaces = () => [
    {
      name: 'node:http idempotency',
      port: s.nodePort,
      path: '/orders',
      size: 8 * 1024 * 1024,
      extra: ['Idempotency-Key: k-oversize'],
    },
    {
      name: 'Fastify idempotency',
      port: s.fastifyPort,
      path: '/orders',
      size: 8 * 1024 * 1024,
      extra: ['Idempotency-Key: k-oversize'],
    },
    {
      name: 'webhook receiver',
      port: s.webhookPort,
      path: '/',
      size: 8 * 1024 * 1024,
      extra: [] as string[],
    },
    // The demo: Fastify, its 64 KiB limits, a payment and a webhook route.
    {
      name: 'demo POST /v1/payments',
      port: demo.port,
      path: '/v1/payments',
      size: 8 * 1024 * 1024,
      extra: ['Idempotency-Key: k-oversize', 'Authorization: Bearer sk_test_acme'],
    },
    {
      name: 'demo POST /webhooks/provider',
      port: demo.port,
      path: '/webhooks/provider',
      size: 8 * 1024 * 1024,
      extra: [],
    },
  ];

  it('is answered 413 every time, on every surface, and nothing is stored', async () => {
    for (const surface of surfaces()) {
      const statuses: number[] = [];
      for (let attempt = 0; attempt < 6; attempt++) {
        const answer = await sendStreaming(
          surface.port,
          [
            `POST ${surface.path} HTTP/1.1`,
            'Host: 127.0.0.1',
            'Connection: close',
            'Content-Type: application/json',
            'Transfer-Encoding: chunked',
            ...surface.extra,
          ],
          chunked(surface.size),
        );
        statuses.push(answer.status);
      }
      expect(statuses, surface.name).toEqual(statuses.map(() => 413));
    }
    expect(await s.counts()).toMatchObject({ orders: 0, receipts: 0 });
  });
});
