/**
 * The rows the receipt statements read, and the keys they name receipts and entities by
 * (statements.ts for the receiver and the workers, operator-statements.ts for the operator tools).
 */

/** A receipt as the claim returns it: what processing it needs. */
export type ClaimedRow = {
  tenant_id: string;
  source: string;
  delivery_id: string;
  event_type: string | null;
  headers: Record<string, string> | string;
  body: Uint8Array;
  received_at: unknown;
  attempts: number;
  deferrals: number;
  waiting_since: unknown;
  /** The sender's intent and trace context, as the request's headers named them (or null). */
  intent: string | null;
  traceparent: string | null;
};

/** One receipt, by its primary key (tenant_id, source, delivery_id). */
export interface ReceiptKey {
  tenant: string;
  source: string;
  deliveryId: string;
}

/** A claimed receipt as its fenced statements name it: its key and the claim's `attempts`. */
export type HeldReceipt = Pick<ClaimedRow, 'tenant_id' | 'source' | 'delivery_id' | 'attempts'>;

/** One entity, by its primary key (tenant_id, scope, entity_key). */
export interface EntityRef {
  tenant: string;
  scope: string;
  key: string;
}

/** The entity a receipt names, as its columns store it; `null` for a receipt about none. */
export type ReceiptEntity = { scope: string; key: string; version: string } | null;

/** An entity's row as `lockEntity` reads it, compared with the event's version. */
export type LockedEntity = {
  ordering: 'state' | 'sequence';
  version: string | null;
  expected: string | null;
  versus_applied: number | null;
  versus_expected: number | null;
  applied_at: unknown;
  parked_at: unknown;
};

/** An operator's skip that covers an event's version. */
export type CoveringSkip = {
  from_version: string;
  through_version: string;
  skipped_at: unknown;
  reason: string | null;
};

/** A receipt as `list` reads it (`receiptColumns`), decoded by `decodeReceipt`. */
export type ReceiptRow = Record<string, unknown>;

/** A parked entity as `parked` reads it, with what waits behind its gap. */
export type ParkedRow = {
  tenant_id: string;
  scope: string;
  entity_key: string;
  version: string | null;
  missing_version: string | null;
  parked_at: unknown;
  parked_reason: string | null;
  waiting: number | null;
  lowest: string | null;
  since: unknown;
};

/** An entity as an operator's skip locks it. */
export type SkippedEntityRow = {
  ordering: string;
  next: string | null;
  missing: string | null;
  lowest: string | null;
};
