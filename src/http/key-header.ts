/**
 * Parses the `Idempotency-Key` request header as draft-ietf-httpapi-idempotency-key-header says:
 * an Item Structured Header (RFC 8941) whose value is an sf-string, e.g.
 * `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`. Parameters after the string are
 * parsed and ignored. Because many clients send the key unquoted, a bare value of printable ASCII
 * without `"`, `,`, `;` or whitespace is accepted too. More than one key, as two header fields or
 * as a list in one field, is refused: which one would be the intent? Two field lines are refused
 * even when one of them is empty: a proxy or framework that keeps the last line instead of the
 * first would see another request than idem did.
 *
 * Hand-written rather than taken from a structured-field library: only the sf-string and parameter
 * grammar is needed (about 60 lines), and the bare-value leniency is ours, not RFC 8941's.
 */
import { maxKeyLength } from '../core/keys.js';

export type KeyHeaderResult =
  | { ok: true; key: string }
  | { ok: false; reason: 'missing' | 'malformed' | 'too-long' | 'multiple'; detail: string };

const bare = /^[\x21-\x7e]+$/;

/**
 * `fields` holds the value of every field line with the header's name, as received (Node's
 * `rawHeaders` keep them apart; a fetch `Headers` joins them with ", ", which this parser also
 * recognises as more than one key).
 */
export function parseIdempotencyKey(fields: readonly string[]): KeyHeaderResult {
  if (fields.length > 1) return fail('multiple', `the request has ${fields.length} idempotency key fields`);
  const value = (fields[0] ?? '').replace(/^[ \t]+|[ \t]+$/g, '');
  if (value === '') return fail('missing', 'the request has no idempotency key');
  const key = value.startsWith('"') ? parseSfStringItem(value) : parseBare(value);
  if (!key.ok) return key;
  if (key.key.length === 0) return fail('malformed', 'the idempotency key is empty');
  if (key.key.length > maxKeyLength) {
    return fail('too-long', `the idempotency key is longer than ${maxKeyLength} characters`);
  }
  if (!bare.test(key.key)) {
    return fail('malformed', 'the idempotency key must be printable ASCII without spaces');
  }
  return key;
}

function parseBare(value: string): KeyHeaderResult {
  if (value.includes(',')) return fail('multiple', 'the idempotency key header holds a list of keys');
  if (!bare.test(value) || value.includes('"') || value.includes(';')) {
    return fail('malformed', 'an unquoted idempotency key must be printable ASCII without ", ; or spaces');
  }
  return { ok: true, key: value };
}

/** RFC 8941 §4.2.5 (sf-string) followed by §4.2.3.2 (parameters), then end of input. */
function parseSfStringItem(input: string): KeyHeaderResult {
  let i = 1;
  let key = '';
  for (;;) {
    if (i >= input.length) return fail('malformed', 'the idempotency key string is not terminated');
    const c = input[i]!;
    const code = c.charCodeAt(0);
    i++;
    if (c === '\\') {
      const next = input[i];
      if (next !== '"' && next !== '\\') return fail('malformed', 'invalid escape in the idempotency key');
      key += next;
      i++;
    } else if (c === '"') {
      break;
    } else if (code < 0x20 || code > 0x7e) {
      return fail('malformed', 'the idempotency key string holds a character outside printable ASCII');
    } else {
      key += c;
    }
  }
  i = skipParameters(input, i);
  if (i < 0) return fail('malformed', 'invalid parameters after the idempotency key');
  const rest = input.slice(i).replace(/^[ \t]+/, '');
  if (rest.startsWith(',')) return fail('multiple', 'the idempotency key header holds a list of keys');
  if (rest !== '') return fail('malformed', 'unexpected characters after the idempotency key');
  return { ok: true, key };
}

const paramKeyStart = /[a-z*]/;
const paramKeyChar = /[a-z0-9_\-.*]/;
const tokenStart = /[A-Za-z*]/;
const tokenChar = /[!#$%&'*+\-.^_`|~0-9A-Za-z:/]/;

/** Returns the index after the parameters, or -1 when they do not parse. */
function skipParameters(input: string, start: number): number {
  let i = start;
  while (input[i] === ';') {
    i++;
    while (input[i] === ' ') i++;
    if (!paramKeyStart.test(input[i] ?? '')) return -1;
    while (i < input.length && paramKeyChar.test(input[i]!)) i++;
    if (input[i] === '=') {
      i = skipBareItem(input, i + 1);
      if (i < 0) return -1;
    }
  }
  return i;
}

function skipBareItem(input: string, start: number): number {
  let i = start;
  const c = input[i] ?? '';
  if (c === '"') {
    for (i++; i < input.length; i++) {
      if (input[i] === '\\') i++;
      else if (input[i] === '"') return i + 1;
    }
    return -1;
  }
  if (c === '?') return input[i + 1] === '0' || input[i + 1] === '1' ? i + 2 : -1;
  if (c === ':') {
    const end = input.indexOf(':', i + 1);
    return end < 0 || !/^[A-Za-z0-9+/=]*$/.test(input.slice(i + 1, end)) ? -1 : end + 1;
  }
  if (c === '-' || /[0-9]/.test(c)) {
    i++;
    while (i < input.length && /[0-9.]/.test(input[i]!)) i++;
    return i;
  }
  if (tokenStart.test(c)) {
    while (i < input.length && tokenChar.test(input[i]!)) i++;
    return i;
  }
  return -1;
}

function fail(reason: 'missing' | 'malformed' | 'too-long' | 'multiple', detail: string): KeyHeaderResult {
  return { ok: false, reason, detail };
}
