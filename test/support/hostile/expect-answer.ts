/**
 * What every hostile request must get back, whatever it was: never a 5xx, never a stack trace,
 * and, when idem saw the request, an RFC 9457 problem document whose `status` is the answer's.
 */
import { expect } from 'vitest';
import type { RawResponse } from './raw-http.js';

/** Traces of a stack or of server internals in a body. */
const internals = /\n\s+at |\bat (?:async )?[\w.<>]+ \(|node:internal|\/src\/|\.[cm]?[jt]s:\d+:\d+/;

export function expectNoLeak(response: RawResponse): void {
  expect(response.status, response.body.toString()).toBeLessThan(500);
  expect(response.body.toString('utf8')).not.toMatch(internals);
}

/** A 4xx problem document from idem (or the receiver). */
export function expectProblem(
  response: RawResponse,
  status?: number,
): { type: string; code: string; status: number } {
  expectNoLeak(response);
  expect(response.status).toBeGreaterThanOrEqual(400);
  if (status !== undefined) expect(response.status).toBe(status);
  expect(response.headers['content-type']?.[0]).toMatch(/^application\/problem\+json/);
  const document = JSON.parse(response.body.toString('utf8')) as {
    type: string;
    code: string;
    status: number;
  };
  expect(document.status).toBe(response.status);
  expect(typeof document.type).toBe('string');
  return document;
}

/**
 * Whether node:http's parser lets a header value through: field-content is HTAB, SP, VCHAR and
 * obs-text. Anything else is refused by the parser with a bare 400 before any application code
 * (idem's included) runs.
 */
export function parserAccepts(value: Uint8Array): boolean {
  return value.every((b) => b === 0x09 || (b >= 0x20 && b !== 0x7f));
}
