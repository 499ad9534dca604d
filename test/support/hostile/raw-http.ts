/**
 * Raw HTTP/1.1 over node:net: the exact bytes go out (repeated header lines, control characters,
 * lengths that lie), which `fetch` would normalise or refuse to send, and the answer comes back
 * as it was written.
 */
import { connect } from 'node:net';

export interface RawResponse {
  status: number;
  headers: Record<string, string[]>;
  body: Buffer;
}

/** Sends `head` (request line and header lines, without the blank line) and `body`; reads to close. */
export function rawRequest(
  port: number,
  head: (string | Buffer)[],
  body: Buffer | string = '',
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('no complete answer within 15 s'));
    }, 15_000);
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => undefined); // a server that resets after answering: keep what arrived
    socket.on('close', () => {
      clearTimeout(timer);
      try {
        resolve(parseResponse(Buffer.concat(chunks)));
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)));
      }
    });
    const lines = head.map((line) => (typeof line === 'string' ? Buffer.from(line, 'latin1') : line));
    const crlf = Buffer.from('\r\n');
    const parts: Buffer[] = [];
    for (const line of lines) parts.push(line, crlf);
    parts.push(crlf, typeof body === 'string' ? Buffer.from(body, 'utf8') : body);
    // Written, not ended: a half-closed request makes node:http drop a response still being
    // produced. `Connection: close` makes the server close once it has answered.
    socket.write(Buffer.concat(parts));
  });
}

function parseResponse(raw: Buffer): RawResponse {
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0)
    throw new Error(
      `no HTTP answer (got ${raw.length} bytes: ${JSON.stringify(raw.subarray(0, 200).toString('latin1'))})`,
    );
  const [statusLine = '', ...lines] = raw.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1]);
  const headers: Record<string, string[]> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    (headers[name] ??= []).push(line.slice(colon + 1).trim());
  }
  let body = raw.subarray(end + 4);
  if (headers['transfer-encoding']?.[0]?.toLowerCase() === 'chunked') body = dechunk(body);
  else if (headers['content-length']) body = body.subarray(0, Number(headers['content-length'][0]));
  return { status, headers, body };
}

function dechunk(data: Buffer): Buffer {
  const out: Buffer[] = [];
  let i = 0;
  for (;;) {
    const lineEnd = data.indexOf('\r\n', i);
    if (lineEnd < 0) break;
    const size = parseInt(data.subarray(i, lineEnd).toString('latin1'), 16);
    if (!size) break;
    out.push(data.subarray(lineEnd + 2, lineEnd + 2 + size));
    i = lineEnd + 2 + size + 2;
  }
  return Buffer.concat(out);
}

/** The first lines of a POST of `body` to `path` on one connection: request line, host, length. */
export function postHead(path: string, body: Buffer, contentType = 'application/json'): (string | Buffer)[] {
  return [
    `POST ${path} HTTP/1.1`,
    'Host: 127.0.0.1',
    'Connection: close',
    `Content-Type: ${contentType}`,
    `Content-Length: ${body.length}`,
  ];
}

/** A header line `name: value`, the value's bytes as given (a string read as latin1). */
export function headerLine(name: string, value: string | Buffer): Buffer {
  return Buffer.concat([
    Buffer.from(`${name}: `, 'latin1'),
    typeof value === 'string' ? Buffer.from(value, 'latin1') : value,
  ]);
}

/** A POST with the given key header lines (each a raw value), content type and body. */
export function post(
  port: number,
  options: {
    path?: string;
    keys?: (string | Buffer)[];
    contentType?: string;
    body?: Buffer | string;
    extra?: (string | Buffer)[];
  },
): Promise<RawResponse> {
  const body =
    typeof options.body === 'string' ? Buffer.from(options.body, 'utf8') : (options.body ?? Buffer.alloc(0));
  const head = postHead(options.path ?? '/orders', body, options.contentType);
  for (const key of options.keys ?? []) head.push(headerLine('Idempotency-Key', key));
  head.push(...(options.extra ?? []));
  return rawRequest(port, head, body);
}
