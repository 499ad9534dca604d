/** Reading answers: are two the same, was one replayed, and how to show one in a report. */
import canonicalize from 'canonicalize';
import type { Answer } from './http-client.js';

/** How two bodies compare: byte for byte, as the same JSON value, or not at all. */
export type BodyMatch = 'identical bytes' | 'equivalent JSON' | 'different';

/**
 * Compares bodies. JSON equivalence uses the RFC 8785 canonical form (keys sorted, numbers written
 * one way), so a server that re-serialises a stored value in another key order still matches, and
 * the report says it was not byte for byte.
 */
export function compareBodies(a: Buffer, b: Buffer): BodyMatch {
  if (a.equals(b)) return 'identical bytes';
  const ca = canonicalJson(a);
  return ca !== undefined && ca === canonicalJson(b) ? 'equivalent JSON' : 'different';
}

/** A key under which equivalent bodies fall together. */
export function bodyClass(body: Buffer): string {
  const canonical = canonicalJson(body);
  return canonical !== undefined ? `json:${canonical}` : `bytes:${body.toString('base64')}`;
}

function canonicalJson(body: Buffer): string | undefined {
  if (body.length === 0) return undefined;
  try {
    return canonicalize(JSON.parse(body.toString('utf8')));
  } catch {
    return undefined;
  }
}

/** True/false when the answer carries the replay header, undefined when it does not. */
export function replayMarker(answer: Answer, header: string): boolean | undefined {
  const raw = answer.headers[header.toLowerCase()];
  if (raw === undefined) return undefined;
  const value = raw.trim().toLowerCase();
  if (value === 'true' || value === '?1' || value === '1') return true;
  if (value === 'false' || value === '?0' || value === '0') return false;
  return undefined;
}

export const isSuccess = (answer: Answer): boolean => answer.status >= 200 && answer.status < 300;
export const isClientError = (answer: Answer): boolean => answer.status >= 400 && answer.status < 500;

/** The start of a body as one line of text, for evidence. */
export function excerpt(body: Buffer, max = 100): string {
  if (body.length === 0) return '(empty body)';
  const text = body.toString('utf8');
  // eslint-disable-next-line no-control-regex -- control characters mark a binary body
  if (text.includes('\uFFFD') || /[\x00-\x08\x0e-\x1f]/.test(text)) return `(${body.length} bytes, binary)`;
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** `201 · 87 B · replayed · {"id":…}`, or `no answer (…)`. */
export function describeAnswer(answer: Answer, replayHeader?: string): string {
  if (answer.status === 0) return `no answer (${answer.error ?? 'connection failed'})`;
  const parts = [String(answer.status), `${answer.body.length} B`];
  if (replayHeader) {
    const marker = replayMarker(answer, replayHeader);
    if (marker !== undefined) parts.push(`${replayHeader}: ${answer.headers[replayHeader.toLowerCase()]}`);
  }
  parts.push(excerpt(answer.body));
  return parts.join(' · ');
}

/** The small JSON form of an answer kept in the report. */
export interface AnswerRecord {
  status: number;
  bytes: number;
  replayed: boolean | null;
  ms: number;
  excerpt: string;
  error?: string;
}

export function recordAnswer(answer: Answer, replayHeader: string): AnswerRecord {
  const record: AnswerRecord = {
    status: answer.status,
    bytes: answer.body.length,
    replayed: replayMarker(answer, replayHeader) ?? null,
    ms: answer.ms,
    excerpt: excerpt(answer.body, 200),
  };
  if (answer.error) record.error = answer.error;
  return record;
}

/** `3×201, 1×409`, most frequent first. */
export function histogram(values: readonly (number | string)[]): string {
  const counts = new Map<string, number>();
  for (const v of values) counts.set(String(v), (counts.get(String(v)) ?? 0) + 1);
  return [...counts.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([v, n]) => `${n}×${v}`)
    .join(', ');
}
