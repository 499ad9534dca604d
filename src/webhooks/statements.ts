/**
 * Every statement of the receiver and its workers, rendered once per schema. Times come from the
 * injected clock as parameters, never from `now()`, so tests move time instead of sleeping.
 */
import type { Causation } from '../core/causation.js';
import { quoteSchema } from '../core/schema-name.js';
import type { QueryResult } from '../core/sql.js';
import {
  affectedRows,
  allRows,
  firstRow,
  nothing,
  preparedStatement,
  tenantForms,
} from '../core/statement.js';
import { sweepStatement, tenantSweepStatement } from '../core/sweeper.js';
import { renderOperatorStatements } from './operator-statements.js';
import type {
  ClaimedRow,
  CoveringSkip,
  EntityRef,
  HeldReceipt,
  LockedEntity,
  ReceiptEntity,
  ReceiptKey,
} from './receipt-rows.js';

/** What a claim takes: up to `limit` receipts due by `now`, leased until `leaseUntil`. */
export interface ReceiptClaim {
  now: Date;
  limit: number;
  leaseUntil: Date;
}

/** $1 source, $2 delivery id, $3 the claim's attempts: the fence of a claimed receipt's statements. */
const fence = (r: HeldReceipt) => [r.source, r.delivery_id, r.attempts];

/** An entity's scope, key and version as three parameters; three nulls without one. */
const entityParams = (entity: ReceiptEntity) =>
  entity ? [entity.scope, entity.key, entity.version] : [null, null, null];

/**
 * Every statement about one receipt or entity names its tenant, as the last parameter: the primary
 * keys are (tenant_id, source, delivery_id) and (tenant_id, scope, entity_key). The workers' claim
 * and the sweeper come in two forms: across every tenant, and pinned to one (`…Tenant`).
 *
 * The receiver's insert and the workers' statements are named prepared statements (node-postgres
 * parses and plans each once per connection); the operator tools and the sweep are sent unnamed.
 */
export function renderReceiptStatements(schema: string) {
  const s = quoteSchema(schema);
  // Bounded batches; dead and waiting receipts are kept until processed, redriven or removed by
  // hand. ctid: the rows are locked, so they cannot move before the DELETE reaches them.
  const sweep = (pin: string) => `DELETE FROM ${s}.webhook_receipts WHERE ${pin}ctid IN (
        SELECT ctid FROM ${s}.webhook_receipts
        WHERE ${pin}state IN ('applied', 'superseded', 'duplicate', 'unhandled') AND expires_at < $1
        LIMIT $2 FOR UPDATE SKIP LOCKED)`;
  /**
   * A claimed receipt's write, fenced by the claim: `WHERE` $1 source, $2 delivery id and $3 the
   * claim's `attempts` (a worker whose claim was taken over writes nothing) and, but for `finish`,
   * the receipt still processing; `set` from $4 on, and the tenant (`tenant`) last.
   */
  const fenced = <Input extends { receipt: HeldReceipt }, Output>(
    key: string,
    spec: {
      set: string;
      tenant: string;
      processing: boolean;
      params: (input: Input) => readonly unknown[];
      result: (result: QueryResult) => Output;
    },
  ) => {
    const processing = spec.processing ? ` AND state = 'processing'` : '';
    return preparedStatement('wh', key, {
      text: `UPDATE ${s}.webhook_receipts
      SET ${spec.set}
      WHERE tenant_id = ${spec.tenant} AND source = $1 AND delivery_id = $2${processing} AND attempts = $3`,
      params: (input: Input) => [...fence(input.receipt), ...spec.params(input), input.receipt.tenant_id],
      result: spec.result,
    });
  };
  return {
    /**
     * One statement, so one transaction: the receipt exists or it does not. A duplicate hits the
     * primary key and inserts nothing (0 rows); no row lock is held past the statement.
     */
    insert: preparedStatement('wh', 'insert', {
      text: `INSERT INTO ${s}.webhook_receipts
        (tenant_id, source, delivery_id, event_type, headers, body, received_at, next_attempt_at, expires_at,
         intent, traceparent)
      VALUES ($8, $1, $2, $3, $4::jsonb, $5, $6, $6, $7, $9, $10)
      ON CONFLICT (tenant_id, source, delivery_id) DO NOTHING`,
      params: (
        r: ReceiptKey & {
          eventType: string | null;
          /** The stored headers, as JSON text. */
          headers: string;
          body: Buffer;
          receivedAt: Date;
          expiresAt: Date;
          /** What the request's `traceparent` and `idem-intent` headers named (core/causation.ts). */
          cause: Causation;
        },
      ) => [
        r.source,
        r.deliveryId,
        r.eventType,
        r.headers,
        r.body,
        r.receivedAt,
        r.expiresAt,
        r.tenant,
        r.cause.intent,
        r.cause.traceparent,
      ],
      result: affectedRows,
    }),

    /**
     * Claims due receipts of every tenant (`claim`), or of one (`claimTenant`, $4 tenant): pending
     * ones whose time has come, waiting ones whose wait is over (or that were woken), and
     * processing ones whose worker's lease ran out (it crashed or hung). SKIP LOCKED lets many
     * workers claim without waiting on each other. The claim raises `attempts`, which fences the
     * previous holder's writes.
     */
    ...tenantForms('claim', {
      text: (pin) => `WITH due AS (
        SELECT tenant_id, source, delivery_id FROM ${s}.webhook_receipts
        WHERE ${pin === null ? '' : `tenant_id = ${pin} AND `}state IN ('pending', 'processing', 'waiting')
          AND next_attempt_at <= $1
        ORDER BY next_attempt_at, received_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      UPDATE ${s}.webhook_receipts r
      SET state = 'processing', attempts = r.attempts + 1, next_attempt_at = $3
      FROM due WHERE ${pin === null ? 'r.tenant_id = due.tenant_id' : `r.tenant_id = ${pin}`}
        AND r.source = due.source AND r.delivery_id = due.delivery_id
      RETURNING r.tenant_id, r.source, r.delivery_id, r.event_type, r.headers, r.body, r.received_at,
        r.attempts, r.deferrals, r.waiting_since, r.intent, r.traceparent`,
      pin: '$4',
      params: (c: ReceiptClaim) => [c.now, c.limit, c.leaseUntil],
      result: allRows<ClaimedRow>,
      prepared: 'wh',
    }),

    /** First statement of the processing transaction: the receipt is still ours (same claim). */
    lock: preparedStatement('wh', 'lock', {
      text: `SELECT 1 FROM ${s}.webhook_receipts
      WHERE tenant_id = $4 AND source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3
      FOR UPDATE`,
      params: (r: HeldReceipt) => [...fence(r), r.tenant_id],
      result: affectedRows,
    }),

    /**
     * Autocommitted before the processing transaction, so the entity's row exists to be locked.
     * Inside the transaction, two workers inserting the same new entity would make the second
     * wait for the first one's whole handler. Here an existing row is a conflict that does
     * nothing at once, even while another worker holds it FOR UPDATE; it waits only while another
     * transaction has written the row and not yet committed, which `applyVersion` keeps to the
     * last statements before COMMIT.
     */
    ensureEntity: preparedStatement('wh', 'ensureEntity', {
      text: `INSERT INTO ${s}.webhook_entity_versions (tenant_id, scope, entity_key, ordering)
      VALUES ($4, $1, $2, $3)
      ON CONFLICT (tenant_id, scope, entity_key) DO NOTHING`,
      params: (e: EntityRef & { ordering: 'state' | 'sequence' }) => [e.scope, e.key, e.ordering, e.tenant],
      result: nothing,
    }),

    /**
     * The entity's lock: one worker at a time. SKIP LOCKED returns no row when another worker
     * holds it, and the receipt then waits instead of the worker. Compares the event's version
     * ($3) with the applied one and, for sequence entities, with the next expected one (the
     * applied version + 1, or the handler's first version $4 when none is applied yet).
     */
    lockEntity: preparedStatement('wh', 'lockEntity', {
      text: `SELECT ordering, version::text AS version,
        coalesce(version + 1, $4::numeric)::text AS expected,
        sign($3::numeric - version)::int AS versus_applied,
        sign($3::numeric - coalesce(version + 1, $4::numeric))::int AS versus_expected,
        applied_at, parked_at
      FROM ${s}.webhook_entity_versions
      WHERE tenant_id = $5 AND scope = $1 AND entity_key = $2
      FOR UPDATE SKIP LOCKED`,
      params: (e: EntityRef & { version: string; firstVersion: string }) => [
        e.scope,
        e.key,
        e.version,
        e.firstVersion,
        e.tenant,
      ],
      result: firstRow<LockedEntity>,
    }),

    /**
     * Moves the entity to this version (unparking it) and wakes the receipts of the entity that
     * wait: every one for a state entity (they waited because it was busy); for a sequence entity
     * those up to the next version ($7, `wakeThrough`) and those parked, which look at their gap
     * afresh. Answers how many it woke.
     */
    applyVersion: preparedStatement('wh', 'applyVersion', {
      text: `WITH applied AS (
        UPDATE ${s}.webhook_entity_versions
        SET version = $3, source = $4, delivery_id = $5, applied_at = $6,
            parked_at = NULL, parked_reason = NULL, missing_version = NULL
        WHERE tenant_id = $8 AND scope = $1 AND entity_key = $2
      )
      UPDATE ${s}.webhook_receipts SET next_attempt_at = $6
      WHERE tenant_id = $8 AND state = 'waiting' AND entity_scope = $1 AND entity_key = $2
        AND ($7::numeric IS NULL OR entity_version <= $7::numeric OR next_attempt_at = 'infinity')`,
      params: (a: {
        entity: EntityRef & { version: string };
        /** The receipt whose event applied. */
        source: string;
        deliveryId: string;
        now: Date;
        wakeThrough: string | null;
      }) => [
        a.entity.scope,
        a.entity.key,
        a.entity.version,
        a.source,
        a.deliveryId,
        a.now,
        a.wakeThrough,
        a.entity.tenant,
      ],
      result: affectedRows,
    }),

    /** Puts a claimed receipt back to wait for its entity, without spending a handler attempt. */
    wait: fenced('wait', {
      set: `state = 'waiting', next_attempt_at = $4, deferrals = deferrals + 1,
          entity_scope = $5, entity_key = $6, entity_version = $7, waiting_since = $8`,
      tenant: '$9',
      processing: true,
      params: (w: {
        receipt: HeldReceipt;
        until: Date | 'infinity';
        entity: NonNullable<ReceiptEntity>;
        waitingSince: unknown;
      }) => [w.until, ...entityParams(w.entity), w.waitingSince ?? null],
      result: nothing,
    }),

    /** The first receipt to find the gap over its timeout parks the entity; the reason stays. */
    park: preparedStatement('wh', 'park', {
      text: `UPDATE ${s}.webhook_entity_versions
      SET parked_at = coalesce(parked_at, $3), parked_reason = coalesce(parked_reason, $4),
          missing_version = coalesce(missing_version, $5)
      WHERE tenant_id = $6 AND scope = $1 AND entity_key = $2`,
      params: (p: { entity: EntityRef; now: Date; reason: string; missing: string | null }) => [
        p.entity.scope,
        p.entity.key,
        p.now,
        p.reason,
        p.missing,
        p.entity.tenant,
      ],
      result: nothing,
    }),

    /** Whether an operator skipped this version of the entity. */
    skipCovering: preparedStatement('wh', 'skipCovering', {
      text: `SELECT from_version::text AS from_version, through_version::text AS through_version,
        skipped_at, reason
      FROM ${s}.webhook_entity_skips
      WHERE tenant_id = $4 AND scope = $1 AND entity_key = $2
        AND $3::numeric BETWEEN from_version AND through_version
      LIMIT 1`,
      params: (e: EntityRef & { version: string }) => [e.scope, e.key, e.version, e.tenant],
      result: firstRow<CoveringSkip>,
    }),

    /** A handled receipt: its outcome, with the entity it named. Fenced. */
    finish: fenced('finish', {
      set: `state = $4, processed_at = $5, last_error = $6,
          entity_scope = $7, entity_key = $8, entity_version = $9, waiting_since = NULL, acted_for = $10`,
      tenant: '$11',
      processing: false,
      params: (f: {
        receipt: HeldReceipt;
        state: 'applied' | 'superseded' | 'duplicate' | 'unhandled';
        now: Date;
        entity: ReceiptEntity;
        /** The intent reference the handler acted for (`onBehalfOf`), or null. */
        actedFor: string | null;
      }) => [
        f.state,
        f.now,
        // $6 last_error: a handled receipt has none.
        null,
        ...entityParams(f.entity),
        f.actedFor,
      ],
      result: nothing,
    }),

    /** After a failed attempt (its transaction rolled back): retry later, or dead. Fenced. */
    fail: fenced('fail', {
      set: `state = $4, next_attempt_at = $5, last_error = $6`,
      tenant: '$7',
      processing: true,
      params: (f: { receipt: HeldReceipt; state: 'dead' | 'pending'; due: Date; error: string }) => [
        f.state,
        f.due,
        f.error,
      ],
      result: affectedRows,
    }),

    /** An invalid event: a dead letter at once, with the reason and the entity it named. Fenced. */
    reject: fenced('reject', {
      set: `state = 'dead', next_attempt_at = $4, processed_at = $4, last_error = $5,
          entity_scope = $6, entity_key = $7, entity_version = $8, waiting_since = NULL`,
      tenant: '$9',
      processing: true,
      params: (r: { receipt: HeldReceipt; now: Date; error: string; entity: ReceiptEntity }) => [
        r.now,
        r.error,
        ...entityParams(r.entity),
      ],
      result: nothing,
    }),

    /** Receipts past their retention, every tenant ($1 now, $2 batch size). */
    sweep: sweepStatement(sweep('')),
    /** `sweep` of one tenant ($3). */
    sweepTenant: tenantSweepStatement(sweep('tenant_id = $3 AND ')),

    // The operator tools' (operator-statements.ts): one object holds every statement of receipts.
    ...renderOperatorStatements(schema),
  };
}

export type ReceiptStatements = ReturnType<typeof renderReceiptStatements>;
