/** What a handler receives: one stored receipt, read-only, with lazy text and JSON views. */

export interface WebhookEvent {
  /** The tenant of the source that received it (`''`, the default tenant, unless the source names one). */
  readonly tenant: string;
  /** The receiver's name for the sender. */
  readonly source: string;
  /** The dedupe key within the source. */
  readonly deliveryId: string;
  /** The event type, or `null` when the sender named none. */
  readonly type: string | null;
  /** The stored headers (lower-case names; never signature headers). */
  readonly headers: Readonly<Record<string, string>>;
  /** The exact bytes that were verified. */
  readonly body: Uint8Array;
  /** Epoch ms. */
  readonly receivedAt: number;
  /** 1 on the first processing attempt. */
  readonly attempt: number;
  /** The body as UTF-8 text. */
  text(): string;
  /** The body parsed as JSON (parsed once, then cached). Throws on a body that is not JSON. */
  json<T = unknown>(): T;
}

export function createEvent(fields: Omit<WebhookEvent, 'text' | 'json'>): WebhookEvent {
  let parsed: { value: unknown } | undefined;
  const text = () =>
    Buffer.from(fields.body.buffer, fields.body.byteOffset, fields.body.byteLength).toString('utf8');
  return {
    ...fields,
    text,
    json<T>() {
      parsed ??= { value: JSON.parse(text()) };
      return parsed.value as T;
    },
  };
}
