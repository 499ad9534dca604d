/** A small layer over undici's `request`: real HTTP over loopback, bodies as exact bytes. */
import { Readable } from 'node:stream';
import { request } from 'undici';

export interface Sent {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  bytes: Buffer;
  json<T = Record<string, unknown>>(): T;
  header(name: string): string | undefined;
  replayed: boolean;
}

export interface SendOptions {
  method?: string;
  /** Sent as an RFC 8941 sf-string (`"key"`), as the draft says; `rawKey` sends the field as given. */
  key?: string;
  rawKey?: string | string[];
  tenant?: string | null;
  /** A JSON value (serialised), a string sent as is, or bytes; `chunked` streams it without a length. */
  body?: unknown;
  contentType?: string;
  chunked?: boolean;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export function client(baseUrl: string) {
  return async function send(path: string, options: SendOptions = {}): Promise<Sent> {
    const headers: string[] = [];
    const add = (name: string, value: string) => headers.push(name, value);
    if (options.tenant !== null) add('x-tenant', options.tenant ?? 'acme');
    if (options.key !== undefined) add('Idempotency-Key', `"${options.key}"`);
    for (const raw of [options.rawKey ?? []].flat()) add('Idempotency-Key', raw);
    for (const [name, value] of Object.entries(options.headers ?? {})) add(name, value);
    let body: string | Buffer | Readable | undefined;
    if (options.body !== undefined) {
      const data =
        typeof options.body === 'string'
          ? options.body
          : options.body instanceof Uint8Array
            ? Buffer.from(options.body)
            : JSON.stringify(options.body);
      add(
        'content-type',
        options.contentType ??
          (typeof options.body === 'string' || !(options.body instanceof Uint8Array)
            ? 'application/json'
            : 'application/octet-stream'),
      );
      body = options.chunked ? Readable.from([Buffer.from(data)]) : data;
    }
    const response = await request(`${baseUrl}${path}`, {
      method: (options.method ?? 'POST') as 'POST',
      headers,
      body,
      signal: options.signal,
    });
    const bytes = Buffer.from(await response.body.arrayBuffer());
    const header = (name: string) => {
      const value = response.headers[name];
      return Array.isArray(value) ? value.join(', ') : value;
    };
    return {
      status: response.statusCode,
      headers: response.headers,
      bytes,
      json: <T>() => JSON.parse(bytes.toString('utf8')) as T,
      header,
      replayed: header('idempotent-replayed') === 'true',
    };
  };
}

export type Send = ReturnType<typeof client>;
