/**
 * Keys, message ids and payloads chosen from an event's values. Powertools keys every event by a
 * hash of what its `eventKeyJmesPath` selects; idem keeps a selected string that is already a
 * valid key as it is (a client's `Idempotency-Key`, an order id stays readable in the console and
 * in `idem inspect`), and hashes the rest.
 */
import { fingerprint, maxKeyLength } from '../index.js';

const printableAscii = /^[\x21-\x7e]+$/;

/** Whether a selected value is no key: nothing, an empty string, or a list or object of nothing. */
function isEmpty(value: unknown): boolean {
  if (value === undefined || value === null || value === '') return true;
  if (typeof value !== 'object') return false;
  const values = Array.isArray(value) ? value : Object.values(value);
  return values.every((v) => v === undefined || v === null || v === '');
}

/** The key of a selected value: the string itself when it is a valid key, else `sha256:` + hash. */
export function keyOf(value: unknown): string | undefined {
  if (isEmpty(value)) return undefined;
  if (typeof value === 'string' && value.length <= maxKeyLength && printableAscii.test(value)) return value;
  return `sha256:${fingerprint(value)}`;
}

/** A message id for the inbox (1–512 characters): the string itself, else `sha256:` + hash. */
export function messageIdOf(value: unknown): string | undefined {
  if (isEmpty(value)) return undefined;
  if (typeof value === 'string' && value.length <= 512) return value;
  return `sha256:${fingerprint(value)}`;
}

interface RecordLike {
  messageId?: unknown;
  body?: unknown;
  messageAttributes?: unknown;
  eventSource?: unknown;
}

/**
 * What a non-HTTP event's key must always come with, by default: the whole event, but for an SQS
 * event the part of each record that is the same on every delivery (a redelivery has a new
 * receipt handle and receive count).
 */
export function defaultPayload(event: unknown): unknown {
  const records = (event as { Records?: unknown } | null)?.Records;
  if (!Array.isArray(records) || !records.every((r) => (r as RecordLike)?.eventSource === 'aws:sqs')) {
    return event;
  }
  return (records as RecordLike[]).map(({ messageId, body, messageAttributes }) => ({
    messageId,
    body,
    messageAttributes,
  }));
}
