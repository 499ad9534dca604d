/**
 * Strict input validation for the demo's API, and the 400 problem that names what was wrong.
 *
 * Fastify's default validator coerces types (`true` → 1, `"1250"` → 1250, `[77]` → 77,
 * `42` → `"42"`), and removes properties an `additionalProperties: false` schema does not allow,
 * silently. A payments API should do neither: a client that sends `"amount": true` has a bug, and
 * charging it 1 cent hides it. So the demo's validator takes JSON types as they are, refuses
 * unknown fields, and its strings refuse control characters (a NUL byte would otherwise pass
 * validation and fail in PostgreSQL after the key was claimed). All of it runs in Fastify's
 * validation step, before idem's preHandler claims the key: a refused request stores nothing.
 */
import type { FastifyError, FastifyServerOptions } from 'fastify';

/** The demo's validator options (Fastify's `ajv.customOptions`). */
export const strictAjv: NonNullable<FastifyServerOptions['ajv']> = {
  customOptions: {
    // Exact JSON types: no `true` → 1, `"12"` → 12, `[77]` → 77, `42` → "42".
    coerceTypes: false,
    // Unknown fields fail validation (with `additionalProperties: false`) instead of vanishing.
    removeAdditional: false,
    // The first error only (Fastify's default): collecting every error of a large hostile body
    // costs time the attacker chooses.
    allErrors: false,
  },
};

/**
 * No control characters (C0, DEL, C1: NUL included) and no lone surrogates (which PostgreSQL
 * would store as U+FFFD, another string than the one validated). Ajv compiles patterns with the
 * `u` flag, so `\p{…}` classes work.
 */
export const controlFree = '^[^\\p{Cc}\\p{Cs}]*$';

/** A string of 1–`maxLength` characters without control characters. */
export function text(maxLength: number) {
  return { type: 'string', minLength: 1, maxLength, pattern: controlFree } as const;
}

/** One entry of a problem's `invalid-params` (the shape RFC 9457 §3's example uses). */
export interface InvalidParam {
  /** The field: a body property path (`customer`, `items.0.sku`), a query or path parameter, a header. */
  name: string;
  in: 'body' | 'query' | 'path' | 'header';
  reason: string;
}

/** The 400 problem document of the demo's API. */
export function invalidRequest(params: InvalidParam[]) {
  const first = params[0];
  return {
    type: 'urn:idem-demo:invalid-request',
    title: 'Invalid request',
    status: 400,
    detail: first ? `${first.name} ${first.reason}` : 'the request is invalid',
    'invalid-params': params,
  };
}

interface AjvError {
  keyword: string;
  instancePath: string;
  params: Record<string, unknown>;
  message?: string;
}

const locations: Record<string, InvalidParam['in']> = {
  body: 'body',
  querystring: 'query',
  params: 'path',
  headers: 'header',
};

/** The `invalid-params` of a Fastify validation error, or null for any other error. */
export function validationParams(error: FastifyError): InvalidParam[] | null {
  const errors = error.validation as AjvError[] | undefined;
  if (!Array.isArray(errors) || errors.length === 0) return null;
  const where = locations[error.validationContext ?? 'body'] ?? 'body';
  return errors.map((e) => {
    const path = e.instancePath
      .split('/')
      .slice(1)
      .map((part) => part.replaceAll('~1', '/').replaceAll('~0', '~'));
    const property =
      e.keyword === 'additionalProperties'
        ? e.params.additionalProperty
        : e.keyword === 'required'
          ? e.params.missingProperty
          : undefined;
    if (typeof property === 'string') path.push(property);
    const name = path.length > 0 ? path.join('.') : where === 'body' ? 'body' : where;
    return { name, in: where, reason: reasonOf(e) };
  });
}

function reasonOf(error: AjvError): string {
  const p = error.params;
  switch (error.keyword) {
    case 'type':
      return `must be of JSON type ${String(p.type)}`;
    case 'additionalProperties':
      return 'is not a known field';
    case 'required':
      return 'is required';
    case 'pattern':
      return p.pattern === controlFree
        ? 'must not contain control characters or unpaired surrogates'
        : `must match ${String(p.pattern)}`;
    case 'minLength':
      return `must be at least ${String(p.limit)} characters`;
    case 'maxLength':
      return `must be at most ${String(p.limit)} characters`;
    case 'minimum':
      return `must be at least ${String(p.limit)}`;
    case 'maximum':
      return `must be at most ${String(p.limit)}`;
    default:
      return error.message ?? 'is invalid';
  }
}
