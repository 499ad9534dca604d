/** A destination for the webhook sender's tests. */
import { createServer } from 'node:http';
import { listenNode } from '../../webhooks/support.js';

/** An endpoint on 127.0.0.1 that answers every request with `status` and records its path in `received`. */
export async function recordingEndpoint(status: number) {
  const received: string[] = [];
  const server = await listenNode(
    createServer((req, res) => {
      received.push(req.url ?? '');
      res.writeHead(status).end();
    }),
  );
  return { ...server, received };
}
