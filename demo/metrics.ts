/**
 * The demo's webhook counter, fed from what idem reports rather than from its tables: deliveries
 * the receiver refused, from the receiver's logger, where every refusal is reported with its code
 * and reason before the answer is sent. (Inbox duplicates come from the inbox's `onDuplicate`.)
 */
import type { IdemMetrics } from '../src/observability/prometheus.js';
import { consoleLogger, type LogFields, type WebhookLogger } from '../src/webhooks/logger.js';

/**
 * The label of `idem_webhook_rejections_total` for a refusal the receiver logged, or undefined
 * for any other log line. The fields are the receiver's own: `code`, and `reason` for 401s.
 */
export function webhookRejectionReason(fields: LogFields): string | undefined {
  switch (fields.code) {
    case 'IDEM_WEBHOOK_UNAUTHORIZED':
      // signature-missing, -unsupported, -mismatch → signature; timestamp-too-old, -too-new → timestamp
      return typeof fields.reason === 'string' && fields.reason.startsWith('timestamp')
        ? 'timestamp'
        : 'signature';
    case 'IDEM_WEBHOOK_MALFORMED':
      return 'malformed';
    case 'IDEM_WEBHOOK_TOO_LARGE':
      return 'too-large';
    case 'IDEM_WEBHOOK_RAW_BODY':
      return 'raw-body-unavailable';
    default:
      return undefined;
  }
}

/**
 * A webhook logger that counts refusals and passes every line on to `next` (default: the
 * receiver's own console logger, so the demo's output is unchanged).
 */
export function countingWebhookLogger(
  metrics: IdemMetrics,
  next: WebhookLogger = consoleLogger,
): WebhookLogger {
  const count = (fields: LogFields) => {
    const reason = webhookRejectionReason(fields);
    try {
      if (reason) metrics.webhookRejected(reason);
    } catch {
      // A metric must never change the answer the sender gets.
    }
  };
  return {
    debug: next.debug?.bind(next),
    info: next.info?.bind(next),
    warn: (message, fields) => {
      count(fields);
      next.warn?.(message, fields);
    },
    error: (message, fields) => {
      count(fields);
      next.error?.(message, fields);
    },
  };
}
