/**
 * Statements of the sender, rendered once per schema. Times are parameters from the injected clock.
 * Every statement about one message, delivery or endpoint names its tenant (the primary keys lead
 * with tenant_id): a tenant's messages fan out to that tenant's endpoints only. The workers' claim,
 * redrive and sweep come in two forms: across every tenant, and pinned to one (`…Tenant`).
 */
import { quoteSchema } from '../../core/schema-name.js';
import { prepareNames } from '../../core/prepared-statements.js';

const endpointColumns = `tenant_id, id, url, secrets, event_types, enabled, disabled_reason, disabled_at, created_at`;

export function senderStatements(schema: string) {
  const s = quoteSchema(schema);
  // Claims due deliveries of enabled endpoints (optionally of one message), raising `attempts`
  // as the fence, and returns everything an attempt needs in the same round trip.
  const claim = (pin: string | null) => `WITH due AS (
        SELECT d.tenant_id, d.message_id, d.endpoint_id FROM ${s}.webhook_deliveries d
        WHERE ${pin === null ? '' : `d.tenant_id = ${pin} AND `}d.state IN ('pending', 'delivering')
          AND d.next_attempt_at <= $1 AND ($4::text IS NULL OR d.message_id = $4)
        ORDER BY d.next_attempt_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      UPDATE ${s}.webhook_deliveries d
      SET state = 'delivering', attempts = d.attempts + 1, next_attempt_at = $3
      FROM due, ${s}.webhook_messages m, ${s}.webhook_endpoints e
      WHERE ${pin === null ? 'd.tenant_id = due.tenant_id' : `d.tenant_id = ${pin}`}
        AND d.message_id = due.message_id AND d.endpoint_id = due.endpoint_id
        AND m.tenant_id = d.tenant_id AND m.id = d.message_id
        AND e.tenant_id = d.tenant_id AND e.id = d.endpoint_id
      RETURNING d.tenant_id, d.message_id, d.endpoint_id, d.attempts, m.event_type, m.payload,
        m.content_type, e.url, e.secrets, e.enabled`;
  const redrive = (pin: string | null) => `UPDATE ${s}.webhook_deliveries d
      SET state = 'pending', attempts = 0, next_attempt_at = $1
      FROM ${s}.webhook_endpoints e
      WHERE ${pin === null ? '' : `d.tenant_id = ${pin} AND `}e.tenant_id = d.tenant_id
        AND e.id = d.endpoint_id AND e.enabled
        AND d.state = ANY ($2::text[])
        AND ($3::text IS NULL OR d.endpoint_id = $3)
        AND ($4::text IS NULL OR d.message_id = $4)`;
  // Messages whose every delivery is finished, older than the retention; attempts cascade. ctid:
  // the rows are locked, so they cannot move before the DELETE reaches them.
  const sweep = (pin: string | null) => `DELETE FROM ${s}.webhook_messages
      WHERE ${pin === null ? '' : `tenant_id = ${pin} AND `}ctid IN (
        SELECT m.ctid FROM ${s}.webhook_messages m
        WHERE ${pin === null ? '' : `m.tenant_id = ${pin} AND `}m.created_at < $1
          AND NOT EXISTS (SELECT 1 FROM ${s}.webhook_deliveries d
                          WHERE d.tenant_id = m.tenant_id AND d.message_id = m.id
                            AND d.state IN ('pending', 'delivering'))
        LIMIT $2 FOR UPDATE SKIP LOCKED)`;
  const texts = {
    // Message and its deliveries in one statement: atomic on any connection or in the caller's
    // transaction. A message id seen before adds nothing: the same event is never fanned out twice.
    enqueue: `WITH m AS (
        INSERT INTO ${s}.webhook_messages (tenant_id, id, event_type, payload, content_type, created_at)
        VALUES ($6, $1, $2, $3, $4, $5)
        ON CONFLICT (tenant_id, id) DO NOTHING
        RETURNING tenant_id, id
      )
      INSERT INTO ${s}.webhook_deliveries (tenant_id, message_id, endpoint_id, next_attempt_at, created_at)
      SELECT m.tenant_id, m.id, e.id, $5, $5 FROM m, ${s}.webhook_endpoints e
      WHERE e.tenant_id = $6 AND e.enabled AND (e.event_types IS NULL OR $2 = ANY (e.event_types))
      ON CONFLICT DO NOTHING`,

    claim: claim(null),
    claimTenant: claim('$5'),

    recordAttempt: `INSERT INTO ${s}.webhook_delivery_attempts
        (tenant_id, message_id, endpoint_id, attempt, started_at, status, latency_ms, outcome, error, retry_after_ms)
      VALUES ($10, $1, $2, $3, $4, $5, $6, $7, $8, $9)`,

    // Fenced by the claimed attempt number.
    settle: `UPDATE ${s}.webhook_deliveries
      SET state = $4, next_attempt_at = $5, last_status = $6, last_error = $7,
          delivered_at = CASE WHEN $4 = 'delivered' THEN $8::timestamptz ELSE delivered_at END
      WHERE tenant_id = $9 AND message_id = $1 AND endpoint_id = $2 AND state = 'delivering' AND attempts = $3`,

    // No request was made (circuit open, endpoint disabled): the claim's attempt is given back.
    release: `UPDATE ${s}.webhook_deliveries
      SET state = $4, attempts = attempts - 1, next_attempt_at = $5, last_error = $6
      WHERE tenant_id = $7 AND message_id = $1 AND endpoint_id = $2 AND state = 'delivering' AND attempts = $3`,

    disableEndpoint: `UPDATE ${s}.webhook_endpoints
      SET enabled = false, disabled_reason = $2, disabled_at = $3
      WHERE tenant_id = $4 AND id = $1 AND enabled`,

    cancelEndpointDeliveries: `UPDATE ${s}.webhook_deliveries
      SET state = 'cancelled', last_error = $2
      WHERE tenant_id = $3 AND endpoint_id = $1 AND state = 'pending'`,

    redrive: redrive(null),
    redriveTenant: redrive('$5'),

    attempts: `SELECT tenant_id, message_id, endpoint_id, attempt, started_at, status, latency_ms, outcome, error,
        retry_after_ms
      FROM ${s}.webhook_delivery_attempts
      WHERE tenant_id = $3 AND message_id = $1 AND ($2::text IS NULL OR endpoint_id = $2)
      ORDER BY id`,

    deliveries: `SELECT tenant_id, message_id, endpoint_id, state, attempts, next_attempt_at, last_status, last_error,
        delivered_at
      FROM ${s}.webhook_deliveries
      WHERE ($1::text IS NULL OR message_id = $1) AND ($2::text IS NULL OR endpoint_id = $2)
        AND ($4::text IS NULL OR tenant_id = $4)
      ORDER BY created_at, endpoint_id LIMIT $3`,

    sweep: sweep(null),
    sweepTenant: sweep('$3'),

    insertEndpoint: `INSERT INTO ${s}.webhook_endpoints (tenant_id, id, url, secrets, event_types, created_at)
      VALUES ($6, $1, $2, $3, $4, $5)
      RETURNING ${endpointColumns}`,
    updateEndpoint: `UPDATE ${s}.webhook_endpoints
      SET url = COALESCE($2, url), secrets = COALESCE($3, secrets),
          event_types = CASE WHEN $5 THEN $4 ELSE event_types END
      WHERE tenant_id = $6 AND id = $1
      RETURNING ${endpointColumns}`,
    enableEndpoint: `UPDATE ${s}.webhook_endpoints
      SET enabled = true, disabled_reason = NULL, disabled_at = NULL
      WHERE tenant_id = $2 AND id = $1
      RETURNING ${endpointColumns}`,
    getEndpoint: `SELECT ${endpointColumns} FROM ${s}.webhook_endpoints WHERE tenant_id = $2 AND id = $1`,
    listEndpoints: `SELECT ${endpointColumns} FROM ${s}.webhook_endpoints WHERE tenant_id = $1 ORDER BY created_at, id`,
    deleteEndpoint: `DELETE FROM ${s}.webhook_endpoints WHERE tenant_id = $2 AND id = $1`,
  };
  return { ...texts, names: prepareNames('whs', texts) };
}

export type SenderStatements = ReturnType<typeof senderStatements>;
