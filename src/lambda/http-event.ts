/**
 * The HTTP events Lambda receives, read into what the Idempotency-Key engine (`idem/http`) sees,
 * and the handler's result turned into the engine's captured response and back:
 *
 * - API Gateway REST APIs (payload format 1.0, also an HTTP API set to 1.0): `httpMethod`,
 *   `resource` (the route pattern), `path`, `multiValueHeaders`, `multiValueQueryStringParameters`;
 *   the result's `headers` and `multiValueHeaders`.
 * - API Gateway HTTP APIs and Lambda function URLs (payload format 2.0): `requestContext.http`,
 *   `routeKey` (`POST /orders/{id}`, or `$default`), `rawPath`, `rawQueryString`, `headers` (one
 *   value per name, repeated fields joined with commas), `cookies`; the result's `cookies`, and a
 *   result without `statusCode` answered as API Gateway does (200, JSON).
 * - Application Load Balancer targets: `requestContext.elb`; `multiValueHeaders` when the target
 *   group has multi-value headers on (then the result must use them too), `statusDescription`.
 *
 * A result is always sent in the form it is stored in, so a replay is the first answer again:
 * header names lower-case, values strings, `isBase64Encoded` explicit.
 */
import { STATUS_CODES } from 'node:http';
import type { CapturedResponse } from '../http/index.js';

/** Which payload format an HTTP event has. Function URLs send `v2`. */
export type HttpEventFormat = 'v1' | 'v2' | 'alb';

/** An HTTP event, read. */
export interface HttpEvent {
  format: HttpEventFormat;
  /** Upper-case. */
  method: string;
  /** The route pattern (`/orders/{id}`), or undefined (ALB, function URLs, `$default`). */
  route: string | undefined;
  path: string;
  /** Without `?`. */
  query: string;
  /** Every field line of a header, as the event carries them (case-insensitive name). */
  fields(name: string): string[];
  /** The body's bytes (base64 decoded), or the value a body parser in front already made of it. */
  body: Uint8Array | { parsed: unknown };
  /** ALB with multi-value headers on: the result must carry `multiValueHeaders`. */
  multiValue: boolean;
}

/**
 * Marks a stored response whose body was sent base64-encoded (binary), so its replay is encoded
 * too. Stored with the replayed headers, never sent.
 */
export const base64Marker = 'x-idem-lambda-base64';

type Dictionary = Record<string, unknown>;
const isDictionary = (value: unknown): value is Dictionary =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The event as an HTTP request, or undefined when it is no HTTP event idem knows. */
export function readHttpEvent(event: unknown): HttpEvent | undefined {
  if (!isDictionary(event) || !isDictionary(event.requestContext)) return undefined;
  const context = event.requestContext;
  if (isDictionary(context.http) && typeof context.http.method === 'string')
    return readV2(event, context.http);
  if (typeof event.httpMethod !== 'string' || typeof event.path !== 'string') return undefined;
  const format: HttpEventFormat = isDictionary(context.elb) ? 'alb' : 'v1';
  const multiValueHeaders = isDictionary(event.multiValueHeaders) ? event.multiValueHeaders : undefined;
  const headers = isDictionary(event.headers) ? event.headers : {};
  return {
    format,
    method: event.httpMethod.toUpperCase(),
    route: format === 'v1' && typeof event.resource === 'string' ? event.resource : undefined,
    path: event.path,
    query: format === 'alb' ? albQuery(event) : v1Query(event),
    fields: (name) => {
      const many = multiValueHeaders && lookup(multiValueHeaders, name);
      if (Array.isArray(many)) return many.map(String);
      const one = lookup(headers, name);
      return typeof one === 'string' ? [one] : [];
    },
    body: readBody(event),
    multiValue: format === 'alb' && multiValueHeaders !== undefined,
  };
}

function readV2(event: Dictionary, http: Dictionary): HttpEvent {
  const headers = isDictionary(event.headers) ? event.headers : {};
  const routeKey = typeof event.routeKey === 'string' ? event.routeKey : '$default';
  const space = routeKey.indexOf(' ');
  return {
    format: 'v2',
    method: String(http.method).toUpperCase(),
    route: space > 0 ? routeKey.slice(space + 1) : undefined,
    path: typeof event.rawPath === 'string' ? event.rawPath : typeof http.path === 'string' ? http.path : '/',
    query: typeof event.rawQueryString === 'string' ? event.rawQueryString : '',
    fields: (name) => {
      const value = lookup(headers, name);
      return typeof value === 'string' ? [value] : [];
    },
    body: readBody(event),
    multiValue: false,
  };
}

/** A header by case-insensitive name (REST APIs and ALB keep the client's case). */
function lookup(map: Dictionary, name: string): unknown {
  if (name in map) return map[name];
  for (const [key, value] of Object.entries(map)) if (key.toLowerCase() === name) return value;
  return undefined;
}

function readBody(event: Dictionary): HttpEvent['body'] {
  const body = event.body;
  if (body === undefined || body === null) return new Uint8Array(0);
  if (typeof body !== 'string') return { parsed: body };
  return event.isBase64Encoded === true ? Buffer.from(body, 'base64') : Buffer.from(body, 'utf8');
}

/** REST APIs hand the query over decoded: encode it again, so that one request reads one way. */
function v1Query(event: Dictionary): string {
  const pairs: string[] = [];
  const many = event.multiValueQueryStringParameters;
  const one = event.queryStringParameters;
  const encode = encodeURIComponent;
  if (isDictionary(many)) {
    for (const [name, values] of Object.entries(many)) {
      for (const value of Array.isArray(values) ? values : [])
        pairs.push(`${encode(name)}=${encode(String(value))}`);
    }
  } else if (isDictionary(one)) {
    for (const [name, value] of Object.entries(one)) pairs.push(`${encode(name)}=${encode(String(value))}`);
  }
  return pairs.join('&');
}

/** ALB hands the query over as received (still URL-encoded). */
function albQuery(event: Dictionary): string {
  const pairs: string[] = [];
  const many = event.multiValueQueryStringParameters;
  const one = event.queryStringParameters;
  if (isDictionary(many)) {
    for (const [name, values] of Object.entries(many)) {
      for (const value of Array.isArray(values) ? values : []) pairs.push(`${name}=${String(value)}`);
    }
  } else if (isDictionary(one)) {
    for (const [name, value] of Object.entries(one)) pairs.push(`${name}=${String(value)}`);
  }
  return pairs.join('&');
}

/**
 * The handler's result as a captured response, or undefined when it is not one API Gateway or
 * ALB would accept (a REST or ALB result without a numeric `statusCode`): such a result is not
 * stored, and is returned as it is.
 */
export function captureResult(format: HttpEventFormat, result: unknown): CapturedResponse | undefined {
  if (!isDictionary(result) || typeof result.statusCode !== 'number') {
    if (format !== 'v2') return undefined;
    // Payload format 2.0: "If your Lambda function returns valid JSON and doesn't return a
    // statusCode, API Gateway assumes" 200, JSON, the result as the body.
    if (result === undefined) return { status: 200, headers: [], body: new Uint8Array(0) };
    const body = typeof result === 'string' ? result : JSON.stringify(result);
    return { status: 200, headers: [['content-type', 'application/json']], body: Buffer.from(body, 'utf8') };
  }
  const headers: [string, string][] = [];
  const many = format !== 'v2' && isDictionary(result.multiValueHeaders) ? result.multiValueHeaders : {};
  const manyNames = new Set(Object.keys(many).map((name) => name.toLowerCase()));
  if (isDictionary(result.headers)) {
    for (const [name, value] of Object.entries(result.headers)) {
      // API Gateway: a name in both lists takes the multi-value list's values.
      if (!manyNames.has(name.toLowerCase())) headers.push([name.toLowerCase(), String(value)]);
    }
  }
  for (const [name, values] of Object.entries(many)) {
    for (const value of Array.isArray(values) ? values : [])
      headers.push([name.toLowerCase(), String(value)]);
  }
  if (format === 'v2' && Array.isArray(result.cookies)) {
    for (const cookie of result.cookies) headers.push(['set-cookie', String(cookie)]);
  }
  const text = typeof result.body === 'string' ? result.body : '';
  const binary = result.isBase64Encoded === true;
  if (binary) headers.push([base64Marker, 'true']);
  return {
    status: result.statusCode,
    headers,
    body: binary ? Buffer.from(text, 'base64') : Buffer.from(text, 'utf8'),
  };
}

/** A response as the event source expects it back. */
export function resultOf(event: HttpEvent, response: CapturedResponse): Record<string, unknown> {
  const binary = response.headers.some(([name]) => name === base64Marker);
  const headers = response.headers.filter(([name]) => name !== base64Marker);
  const bytes = Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength);
  const body = binary ? bytes.toString('base64') : bytes.toString('utf8');
  const result: Record<string, unknown> = { statusCode: response.status };
  if (event.format === 'alb') {
    result.statusDescription = `${response.status} ${STATUS_CODES[response.status] ?? ''}`.trim();
  }
  if (event.format === 'v2') {
    const cookies = headers.filter(([name]) => name === 'set-cookie').map(([, value]) => value);
    result.headers = joined(headers.filter(([name]) => name !== 'set-cookie'));
    if (cookies.length > 0) result.cookies = cookies;
  } else if (event.multiValue) {
    result.multiValueHeaders = grouped(headers);
  } else if (event.format === 'alb') {
    // Without multi-value headers an ALB result holds one value per name: the last one.
    result.headers = Object.fromEntries(headers);
  } else {
    const groups = grouped(headers);
    const single = Object.entries(groups).filter(([, values]) => values.length === 1);
    const repeated = Object.entries(groups).filter(([, values]) => values.length > 1);
    result.headers = Object.fromEntries(single.map(([name, values]) => [name, values[0]]));
    if (repeated.length > 0) result.multiValueHeaders = Object.fromEntries(repeated);
  }
  result.body = body;
  result.isBase64Encoded = binary;
  return result;
}

function grouped(headers: readonly [string, string][]): Record<string, string[]> {
  const groups: Record<string, string[]> = {};
  for (const [name, value] of headers) (groups[name] ??= []).push(value);
  return groups;
}

/** Payload format 2.0 carries one value per header: repeated ones are joined, as HTTP allows. */
function joined(headers: readonly [string, string][]): Record<string, string> {
  return Object.fromEntries(
    Object.entries(grouped(headers)).map(([name, values]) => [name, values.join(', ')]),
  );
}
