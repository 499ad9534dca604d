/**
 * The receiver: verify first, then persist the receipt in one statement keyed by
 * (source, delivery id), then answer 2xx. A duplicate also gets 2xx and does no new work. Nothing
 * of the business runs here: workers (processor.ts) claim receipts after the answer.
 */
import { systemClock, type Clock } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { Queryable } from '../core/sql.js';
import { defaultTenant, validateTenant } from '../core/tenant.js';
import { defaultSchema } from '../core/schema-name.js';
import { isWebhookRequestError, WebhookBodyTooLargeError, type WebhookRequestError } from './errors.js';
import { pickHeaders } from './headers.js';
import { consoleLogger, errorMessage, type WebhookLogger } from './logger.js';
import { errorAnswer, problemAnswer, type WebhookAnswer } from './problem.js';
import { receiptStatements, type ReceiptStatements } from './statements.js';
import type { WebhookHeaders, WebhookVerifier } from './verify/types.js';
import { positiveInteger } from '../core/validate.js';
import type { StoreOptions } from '../core/store.js';

/** One sender the receiver accepts, under a name of your choice (`github`, `stripe`, `billing`). */
export interface WebhookSourceOptions {
  verifier: WebhookVerifier;
  /** How long receipts are kept (the dedupe horizon). Default: the verifier's (4 days for GitHub, Stripe, Standard Webhooks). */
  retentionMs?: number;
  /** Headers to store besides the verifier's defaults. Signature headers are never stored. */
  storeHeaders?: string[];
  /** Largest body of this source, in bytes. Default: the receiver's `maxBodyBytes`. */
  maxBodyBytes?: number;
  /**
   * The tenant this source's deliveries belong to: the receipt, the entities its handlers name and
   * the dedupe key (tenant, source, delivery id) live with the tenant's other rows. Mount one source
   * per tenant (`stripe-acme`, `stripe-globex`) when each tenant has its own sender account.
   * Default `''`, the default tenant.
   */
  tenant?: string;
}

/** Options of `createWebhookReceiver`. */
export interface WebhookReceiverOptions extends Omit<StoreOptions, 'sql'> {
  /** Where receipts are written. A pool (`fromPg(pool)`): each receipt is one autocommit statement. */
  sql: Queryable;
  /** The senders, by name. A bare verifier takes every default. */
  sources: Record<string, WebhookSourceOptions | WebhookVerifier>;
  /**
   * Largest body accepted, in bytes; a larger one gets 413 before anything is stored. Default
   * 1 MiB. GitHub caps payloads at 25 MB: raise it for sources that send large pushes. (The same
   * name as `idem/http`'s option.)
   */
  maxBodyBytes?: number;
  /** Where rejections and failures are reported. Default: warnings and errors to stderr as JSON. */
  logger?: WebhookLogger;
  /** Called after a new receipt committed, e.g. `() => processor.notify()` to skip the poll delay. */
  onReceipt?: (receipt: { source: string; deliveryId: string; eventType: string | null }) => void;
}

/** A source with its defaults resolved. */
export interface ResolvedSource {
  name: string;
  tenant: string;
  verifier: WebhookVerifier;
  retentionMs: number;
  maxBodyBytes: number;
  storedHeaders: readonly string[];
  excludedHeaders: ReadonlySet<string>;
}

/** What `receive` did, beside the answer. */
export type ReceiveOutcome =
  | { kind: 'stored'; deliveryId: string; eventType: string | null }
  | { kind: 'duplicate'; deliveryId: string; eventType: string | null }
  | { kind: 'rejected'; error: WebhookRequestError }
  | { kind: 'failed'; error: unknown };

const defaultMaxBodyBytes = 1024 * 1024;

/**
 * Receives webhooks for several sources. The `webhooks` of each framework's subpath (`idem/express`,
 * `idem/fastify`, `idem/hono`, `idem/node-http`) reads the raw bytes and calls `receive`.
 */
export class WebhookReceiver {
  readonly schema: string;
  readonly clock: Clock;
  readonly logger: WebhookLogger;
  private readonly sql: Queryable;
  private readonly statements: ReceiptStatements;
  private readonly sources = new Map<string, ResolvedSource>();
  private readonly onReceipt: WebhookReceiverOptions['onReceipt'];

  constructor(options: WebhookReceiverOptions) {
    this.sql = options.sql;
    this.schema = options.schema ?? defaultSchema;
    this.statements = receiptStatements(this.schema);
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? consoleLogger;
    this.onReceipt = options.onReceipt;
    const maxBodyBytes = positiveInteger('maxBodyBytes', options.maxBodyBytes ?? defaultMaxBodyBytes);
    for (const [name, given] of Object.entries(options.sources)) {
      if (!/^[\x21-\x7e]{1,100}$/.test(name)) {
        throw new InvalidArgumentError(`source name must be 1–100 printable ASCII characters`);
      }
      const source: WebhookSourceOptions = 'verify' in given ? { verifier: given } : given;
      const tenant = source.tenant ?? defaultTenant;
      validateTenant(tenant);
      const excluded = new Set(source.verifier.signatureHeaders.map((h) => h.toLowerCase()));
      this.sources.set(name, {
        name,
        tenant,
        verifier: source.verifier,
        retentionMs: positiveInteger('retentionMs', source.retentionMs ?? source.verifier.retentionMs),
        maxBodyBytes: positiveInteger('maxBodyBytes', source.maxBodyBytes ?? maxBodyBytes),
        storedHeaders: [
          ...new Set(
            [...source.verifier.storedHeaders, ...(source.storeHeaders ?? [])].map((h) => h.toLowerCase()),
          ),
        ],
        excludedHeaders: excluded,
      });
    }
    if (this.sources.size === 0) throw new InvalidArgumentError('createWebhookReceiver: no sources');
  }

  /** The resolved source, or an `InvalidArgumentError` naming the unknown one. */
  source(name: string): ResolvedSource {
    const source = this.sources.get(name);
    if (!source) throw new InvalidArgumentError(`unknown webhook source: ${name}`);
    return source;
  }

  /** Source names, for adapters that mount one route per source. */
  sourceNames(): string[] {
    return [...this.sources.keys()];
  }

  /**
   * Verifies, stores and answers one delivery. Never throws for bad input: every outcome is an
   * answer (202 stored, 200 duplicate, 400/401/413 problem, 503 problem when the database failed).
   */
  async receive(
    sourceName: string,
    request: { headers: WebhookHeaders; body: Uint8Array },
  ): Promise<WebhookAnswer> {
    return (await this.receiveWithOutcome(sourceName, request)).answer;
  }

  /** `receive`, also saying what happened (for adapters, tests and metrics). */
  async receiveWithOutcome(
    sourceName: string,
    request: { headers: WebhookHeaders; body: Uint8Array },
  ): Promise<{ answer: WebhookAnswer; outcome: ReceiveOutcome }> {
    const source = this.source(sourceName);
    const now = this.clock.now();
    let verified;
    try {
      if (request.body.byteLength > source.maxBodyBytes)
        throw new WebhookBodyTooLargeError(source.maxBodyBytes);
      verified = source.verifier.verify(request, now);
    } catch (error) {
      if (!isWebhookRequestError(error)) throw error;
      return { answer: this.reject(source.name, error), outcome: { kind: 'rejected', error } };
    }

    const { deliveryId, eventType } = verified;
    const headers = pickHeaders(request.headers, source.storedHeaders, source.excludedHeaders);
    let inserted: boolean;
    try {
      const { rowCount } = await this.sql.query(
        this.statements.insert,
        [
          source.name,
          deliveryId,
          eventType,
          JSON.stringify(headers),
          Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength),
          new Date(now),
          new Date(now + source.retentionMs),
          source.tenant,
        ],
        this.statements.names.insert,
      );
      inserted = rowCount === 1;
    } catch (error) {
      // Not stored: a retryable answer, so the sender delivers again.
      this.logger.error?.('webhook receipt not stored', {
        source: source.name,
        deliveryId,
        error: errorMessage(error),
      });
      const answer = problemAnswer(503, 'webhook-unavailable', 'Webhook receipt not stored', {
        code: 'IDEM_WEBHOOK_UNAVAILABLE',
        detail: 'the receipt could not be stored; deliver again later',
      });
      answer.headers['retry-after'] = '5';
      return { answer, outcome: { kind: 'failed', error } };
    }

    if (inserted) {
      this.logger.debug?.('webhook stored', { source: source.name, deliveryId, eventType });
      try {
        this.onReceipt?.({ source: source.name, deliveryId, eventType });
      } catch (error) {
        this.logger.warn?.('webhook onReceipt listener threw', {
          source: source.name,
          error: errorMessage(error),
        });
      }
    } else {
      this.logger.info?.('webhook duplicate acknowledged', { source: source.name, deliveryId, eventType });
    }
    return {
      answer: {
        status: inserted ? 202 : 200,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ received: true, duplicate: !inserted }),
      },
      outcome: { kind: inserted ? 'stored' : 'duplicate', deliveryId, eventType },
    };
  }

  /** The answer to an adapter-side failure (body too large while reading, raw body gone). */
  reject(sourceName: string, error: WebhookRequestError): WebhookAnswer {
    const fields = {
      source: sourceName,
      status: error.status,
      code: error.code,
      reason: 'reason' in error ? error.reason : undefined,
      error: error.message,
    };
    // A consumed body is the application's misconfiguration: loud, at error level.
    if (error.status === 500) this.logger.error?.('webhook body unavailable for verification', fields);
    else this.logger.warn?.('webhook rejected', fields);
    return errorAnswer(error);
  }
}

/**
 * Creates a receiver. See `WebhookReceiverOptions`.
 *
 * @example
 * const receiver = createWebhookReceiver({
 *   sql: fromPg(pool),
 *   sources: { stripe: createStripeVerifier({ secrets: [process.env.STRIPE_WEBHOOK_SECRET!] }) },
 *   onReceipt: () => processor.notify(),
 * });
 * await app.register(webhooks({ receiver, routes: { '/webhooks/stripe': 'stripe' } })); // idem/fastify
 */
export function createWebhookReceiver(options: WebhookReceiverOptions): WebhookReceiver {
  return new WebhookReceiver(options);
}
