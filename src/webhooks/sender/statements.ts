/** Statements of the sender, rendered once per schema. Times are parameters from the injected clock. */
import { quoteSchema } from '../../migrate/schema-name.js';
import { prepareNames } from '../statements.js';

export function senderStatements(schema: string) {
  const s = quoteSchema(schema);
  const texts = {
    // Message and its deliveries in one statement: atomic on any connection or in the caller's
    // transaction. A message id seen before adds nothing: the same event is never fanned out twice.
    enqueue: `WITH m AS (
        INSERT INTO ${s}.webhook_messages (id, event_type, payload, content_type, created_at)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (id) DO NOTHING
        RETURNING id
      )
      INSERT INTO ${s}.webhook_deliveries (message_id, endpoint_id, next_attempt_at, created_at)
      SELECT m.id, e.id, $5, $5 FROM m, ${s}.webhook_endpoints e
      WHERE e.enabled AND (e.event_types IS NULL OR $2 = ANY (e.event_types))
      ON CONFLICT DO NOTHING`,

    // Claims due deliveries of enabled endpoints (optionally of one message), raising `attempts`
    // as the fence, and returns everything an attempt needs in the same round trip.
    claim: `WITH due AS (
        SELECT d.message_id, d.endpoint_id FROM ${s}.webhook_deliveries d
        WHERE d.state IN ('pending', 'delivering') AND d.next_attempt_at <= $1
          AND ($4::text IS NULL OR d.message_id = $4)
        ORDER BY d.next_attempt_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      UPDATE ${s}.webhook_deliveries d
      SET state = 'delivering', attempts = d.attempts + 1, next_attempt_at = $3
      FROM due, ${s}.webhook_messages m, ${s}.webhook_endpoints e
      WHERE d.message_id = due.message_id AND d.endpoint_id = due.endpoint_id
        AND m.id = d.message_id AND e.id = d.endpoint_id
      RETURNING d.message_id, d.endpoint_id, d.attempts, m.event_type, m.payload, m.content_type,
        e.url, e.secrets, e.enabled`,

    recordAttempt: `INSERT INTO ${s}.webhook_delivery_attempts
        (message_id, endpoint_id, attempt, started_at, status, latency_ms, outcome, error, retry_after_ms)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,

    // Fenced by the claimed attempt number.
    settle: `UPDATE ${s}.webhook_deliveries
      SET state = $4, next_attempt_at = $5, last_status = $6, last_error = $7,
          delivered_at = CASE WHEN $4 = 'delivered' THEN $8::timestamptz ELSE delivered_at END
      WHERE message_id = $1 AND endpoint_id = $2 AND state = 'delivering' AND attempts = $3`,

    // No request was made (circuit open, endpoint disabled): the claim's attempt is given back.
    release: `UPDATE ${s}.webhook_deliveries
      SET state = $4, attempts = attempts - 1, next_attempt_at = $5, last_error = $6
      WHERE message_id = $1 AND endpoint_id = $2 AND state = 'delivering' AND attempts = $3`,

    disableEndpoint: `UPDATE ${s}.webhook_endpoints
      SET enabled = false, disabled_reason = $2, disabled_at = $3
      WHERE id = $1 AND enabled`,

    cancelEndpointDeliveries: `UPDATE ${s}.webhook_deliveries
      SET state = 'cancelled', last_error = $2
      WHERE endpoint_id = $1 AND state = 'pending'`,

    redrive: `UPDATE ${s}.webhook_deliveries d
      SET state = 'pending', attempts = 0, next_attempt_at = $1
      FROM ${s}.webhook_endpoints e
      WHERE e.id = d.endpoint_id AND e.enabled
        AND d.state = ANY ($2::text[])
        AND ($3::text IS NULL OR d.endpoint_id = $3)
        AND ($4::text IS NULL OR d.message_id = $4)`,

    attempts: `SELECT message_id, endpoint_id, attempt, started_at, status, latency_ms, outcome, error, retry_after_ms
      FROM ${s}.webhook_delivery_attempts
      WHERE message_id = $1 AND ($2::text IS NULL OR endpoint_id = $2)
      ORDER BY id`,

    deliveries: `SELECT message_id, endpoint_id, state, attempts, next_attempt_at, last_status, last_error, delivered_at
      FROM ${s}.webhook_deliveries
      WHERE ($1::text IS NULL OR message_id = $1) AND ($2::text IS NULL OR endpoint_id = $2)
      ORDER BY created_at, endpoint_id LIMIT $3`,

    // Messages whose every delivery is finished, older than the retention; attempts cascade.
    sweep: `DELETE FROM ${s}.webhook_messages WHERE id IN (
        SELECT m.id FROM ${s}.webhook_messages m
        WHERE m.created_at < $1
          AND NOT EXISTS (SELECT 1 FROM ${s}.webhook_deliveries d
                          WHERE d.message_id = m.id AND d.state IN ('pending', 'delivering'))
        LIMIT $2 FOR UPDATE SKIP LOCKED)`,

    insertEndpoint: `INSERT INTO ${s}.webhook_endpoints (id, url, secrets, event_types, created_at)
      VALUES ($1, $2, $3, $4, $5)
      RETURNING id, url, secrets, event_types, enabled, disabled_reason, disabled_at, created_at`,
    updateEndpoint: `UPDATE ${s}.webhook_endpoints
      SET url = COALESCE($2, url), secrets = COALESCE($3, secrets),
          event_types = CASE WHEN $5 THEN $4 ELSE event_types END
      WHERE id = $1
      RETURNING id, url, secrets, event_types, enabled, disabled_reason, disabled_at, created_at`,
    enableEndpoint: `UPDATE ${s}.webhook_endpoints
      SET enabled = true, disabled_reason = NULL, disabled_at = NULL
      WHERE id = $1
      RETURNING id, url, secrets, event_types, enabled, disabled_reason, disabled_at, created_at`,
    getEndpoint: `SELECT id, url, secrets, event_types, enabled, disabled_reason, disabled_at, created_at
      FROM ${s}.webhook_endpoints WHERE id = $1`,
    listEndpoints: `SELECT id, url, secrets, event_types, enabled, disabled_reason, disabled_at, created_at
      FROM ${s}.webhook_endpoints ORDER BY created_at, id`,
    deleteEndpoint: `DELETE FROM ${s}.webhook_endpoints WHERE id = $1`,
  };
  return { ...texts, names: prepareNames('whs', texts) };
}

export type SenderStatements = ReturnType<typeof senderStatements>;
