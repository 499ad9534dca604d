/**
 * Which response headers a replay carries. A stored response is the first answer's *meaning*, not
 * its transport: headers that describe the connection, the moment, or the client's session are
 * not replayed.
 */

/** Stored and replayed unless the `replayHeaders` option says otherwise. */
export const defaultReplayHeaders: readonly string[] = [
  'content-type',
  'content-language',
  // The stored bytes are the encoded bytes; their encoding must travel with them.
  'content-encoding',
  'content-disposition',
  'content-location',
  'location',
  'link',
  'etag',
  'last-modified',
  'cache-control',
  'expires',
  'vary',
];

/**
 * Never stored, whatever the options say: `date` (a replay is a new message; the server adds its
 * own), `content-length` (recomputed from the stored bytes), and the hop-by-hop headers of
 * RFC 9110 §7.6.1, which belong to one connection.
 */
export const neverReplayed: ReadonlySet<string> = new Set([
  'date',
  'content-length',
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'proxy-authenticate',
  'proxy-authorization',
]);

/** The header idem adds to every replayed response. */
export const replayedHeader = 'idempotent-replayed';

/** Keeps the headers in `allowed` (lower-case names), in their order, dropping the never-replayed. */
export function selectReplayHeaders(
  headers: readonly [string, string][],
  allowed: ReadonlySet<string>,
): [string, string][] {
  return headers.filter(([name]) => allowed.has(name) && !neverReplayed.has(name));
}

/**
 * Flattens a Node-style header map (`res.getHeaders()`, Fastify's `reply.getHeaders()`) into
 * lower-case pairs; an array value (Set-Cookie) becomes several pairs.
 */
export function headerPairs(
  map: Record<string, number | string | readonly string[] | undefined>,
): [string, string][] {
  const pairs: [string, string][] = [];
  for (const [name, value] of Object.entries(map)) {
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    if (Array.isArray(value)) for (const v of value as readonly string[]) pairs.push([lower, String(v)]);
    else pairs.push([lower, String(value)]);
  }
  return pairs;
}

/** Groups pairs back into a map with arrays for repeated names, as Node's `setHeader` wants. */
export function headerMap(pairs: readonly [string, string][]): Record<string, string | string[]> {
  const map: Record<string, string | string[]> = {};
  for (const [name, value] of pairs) {
    const existing = map[name];
    if (existing === undefined) map[name] = value;
    else if (Array.isArray(existing)) existing.push(value);
    else map[name] = [existing, value];
  }
  return map;
}
