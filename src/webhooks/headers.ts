/** Header lookups over the shapes frameworks hand over: Node's header object and Fetch `Headers`. */
import type { WebhookHeaders } from './verify/types.js';

/** Node's `IncomingHttpHeaders` (lower-case keys; repeated values joined or listed). */
export type NodeHeaders = Record<string, string | string[] | undefined>;

/** Lookup over Node's header object (Express, Fastify, node:http). */
export function nodeHeaders(headers: NodeHeaders): WebhookHeaders {
  return {
    get(name) {
      const value = headers[name];
      return Array.isArray(value) ? value.join(', ') : value;
    },
  };
}

/** Lookup over a Fetch `Headers` (Hono, Request). */
export function fetchHeaders(headers: { get(name: string): string | null }): WebhookHeaders {
  return { get: (name) => headers.get(name) ?? undefined };
}

/** Lookup over a plain record with any-case keys (tests, custom transports). */
export function recordHeaders(headers: Record<string, string | undefined>): WebhookHeaders {
  const lower: NodeHeaders = {};
  for (const [key, value] of Object.entries(headers)) lower[key.toLowerCase()] = value;
  return nodeHeaders(lower);
}

/** Picks the named headers that are present, never one listed in `excluded`. */
export function pickHeaders(
  headers: WebhookHeaders,
  names: Iterable<string>,
  excluded: ReadonlySet<string>,
): Record<string, string> {
  const picked: Record<string, string> = {};
  for (const name of names) {
    if (excluded.has(name)) continue;
    const value = headers.get(name);
    if (value !== undefined) picked[name] = value;
  }
  return picked;
}
