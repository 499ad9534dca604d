/**
 * The demo's event counters, fed from what idem reports rather than from its tables: duplicates
 * the ledger's inbox acknowledged (from the result of `inbox.handle`, which every transport's
 * consumer calls), and webhook deliveries the receiver refused (from the receiver's logger, where
 * every refusal is reported with its code and reason before the answer is sent).
 */
import {
  Inbox,
  type HandleResult,
  type InboxContext,
  type InboxMessage,
  type InboxOptions,
} from '../inbox/inbox.js';
import type { Transaction } from '../core/sql.js';
import type { IdemMetrics } from '../observability/prometheus.js';
import { consoleLogger, type LogFields, type WebhookLogger } from '../webhooks/logger.js';

/** An inbox that reports each duplicate it acknowledged, by consumer. */
export class CountingInbox<Client = unknown> extends Inbox<Client> {
  constructor(
    options: InboxOptions<Client>,
    private readonly onDuplicate: (consumer: string) => void,
  ) {
    super(options);
  }

  override async handle<T>(
    message: InboxMessage,
    handler: (tx: Transaction<Client>, context: InboxContext) => Promise<T>,
  ): Promise<HandleResult<T>> {
    return this.report(message, await super.handle(message, handler));
  }

  override async handleIn<T, TxClient>(
    tx: Transaction<TxClient>,
    message: InboxMessage,
    handler: (tx: Transaction<TxClient>, context: InboxContext) => Promise<T>,
  ): Promise<HandleResult<T>> {
    return this.report(message, await super.handleIn(tx, message, handler));
  }

  private report<T>(message: InboxMessage, result: HandleResult<T>): HandleResult<T> {
    if (result.duplicate) {
      try {
        this.onDuplicate(message.consumer);
      } catch {
        // A metric must never turn a processed message into a failed one.
      }
    }
    return result;
  }
}

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
