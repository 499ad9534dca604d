/**
 * The receiver: verify first, then persist the receipt in one statement keyed by
 * (source, delivery id), then answer 2xx. A duplicate also gets 2xx and does no new work. Nothing
 * of the business runs here: workers (processor.ts) claim receipts after the answer.
 */
import { causationFromHeaders, causationHeaders, type Causation } from '../core/causation.js';
import { systemClock, type Clock } from '../core/clock.js';
import { createEvents, type IdemEvents } from '../core/event-channel.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { Queryable } from '../core/sql.js';
import { defaultTenant, validateTenant } from '../core/tenant.js';
import { defaultSchema } from '../core/schema-name.js';
import {
  isWebhookRequestError,
  WebhookBodyTooLargeError,
  type UnauthorizedReason,
  type WebhookRequestError,
} from './errors.js';
import { pickHeaders } from './headers.js';
import { errorAnswer, problemAnswer, type WebhookAnswer } from './problem.js';
import { renderReceiptStatements, type ReceiptStatements } from './statements.js';
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
}

/**
 * Why the receiver refused a delivery before storing anything (the label of
 * `idem_webhook_rejections_total`): `signature` (missing, unsupported or no match: 401),
 * `timestamp` (outside the tolerance: 401), `malformed` (400), `too-large` (413),
 * `raw-body-unavailable` (a body parser consumed the bytes: 500, the application's setup).
 */
export type WebhookRejectionReason =
  'signature' | 'timestamp' | 'malformed' | 'too-large' | 'raw-body-unavailable';

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /**
     * The receiver stored a delivery (answered 202), or acknowledged one it had stored before
     * (`duplicate`, answered 200, no new work), after the receipt's statement committed. Wake the
     * processor on it to skip its poll delay:
     * `events.on('webhook:received', (e) => e.duplicate || processor.notify())`.
     */
    'webhook:received': {
      tenant: string;
      source: string;
      deliveryId: string;
      eventType: string | null;
      duplicate: boolean;
    };
    /**
     * The receiver refused a delivery before storing anything (401, 400, 413, or 500 when the raw
     * body was consumed by a parser, which is also an `error`). `message` names what is wrong,
     * never a header's value or a signature; `detail`, for a 401, which check failed.
     */
    'webhook:rejected': {
      source: string;
      reason: WebhookRejectionReason;
      status: number;
      code: WebhookRequestError['code'];
      message: string;
      detail?: UnauthorizedReason;
    };
  }
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
  private readonly events: IdemEvents;
  private readonly sql: Queryable;
  private readonly statements: ReceiptStatements;
  private readonly sources = new Map<string, ResolvedSource>();

  constructor(options: WebhookReceiverOptions) {
    this.sql = options.sql;
    this.schema = options.schema ?? defaultSchema;
    this.statements = renderReceiptStatements(this.schema);
    this.clock = options.clock ?? systemClock;
    this.events = options.events ?? createEvents();
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
      const stored = await this.statements.insert(this.sql, {
        tenant: source.tenant,
        source: source.name,
        deliveryId,
        eventType,
        headers: JSON.stringify(headers),
        body: Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength),
        receivedAt: new Date(now),
        expiresAt: new Date(now + source.retentionMs),
        cause: requestCause(request.headers),
      });
      inserted = stored === 1;
    } catch (error) {
      // Not stored: a retryable answer, so the sender delivers again.
      this.events.emit('error', { source: 'webhook-receiver', where: 'store', error });
      const answer = problemAnswer(503, 'webhook-unavailable', 'Webhook receipt not stored', {
        code: 'IDEM_WEBHOOK_UNAVAILABLE',
        detail: 'the receipt could not be stored; deliver again later',
      });
      answer.headers['retry-after'] = '5';
      return { answer, outcome: { kind: 'failed', error } };
    }

    this.events.emit('webhook:received', {
      tenant: source.tenant,
      source: source.name,
      deliveryId,
      eventType,
      duplicate: !inserted,
    });
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
    const detail = 'reason' in error ? error.reason : undefined;
    this.events.emit('webhook:rejected', {
      source: sourceName,
      reason: rejectionReason(error),
      status: error.status,
      code: error.code,
      message: error.message,
      ...(detail ? { detail } : {}),
    });
    // A consumed body is the application's misconfiguration: loud, an error (stderr by default).
    if (error.status === 500)
      this.events.emit('error', { source: 'webhook-receiver', where: 'raw-body', error });
    return errorAnswer(error);
  }
}

/** The metric label of a refusal: 401s split into signature and timestamp. */
function rejectionReason(error: WebhookRequestError): WebhookRejectionReason {
  switch (error.code) {
    case 'IDEM_WEBHOOK_UNAUTHORIZED':
      return error.reason.startsWith('timestamp') ? 'timestamp' : 'signature';
    case 'IDEM_WEBHOOK_MALFORMED':
      return 'malformed';
    case 'IDEM_WEBHOOK_TOO_LARGE':
      return 'too-large';
    case 'IDEM_WEBHOOK_RAW_BODY':
      return 'raw-body-unavailable';
  }
}

/**
 * Creates a receiver. See `WebhookReceiverOptions`.
 *
 * @example
 * const receiver = createWebhookReceiver({
 *   sql: fromPg(pool),
 *   sources: { stripe: createStripeVerifier({ secrets: [process.env.STRIPE_WEBHOOK_SECRET!] }) },
 *   events,
 * });
 * events.on('webhook:received', (e) => e.duplicate || processor.notify());
 * await app.register(webhooks({ receiver, routes: { '/webhooks/stripe': 'stripe' } })); // idem/fastify
 */
export function createWebhookReceiver(options: WebhookReceiverOptions): WebhookReceiver {
  return new WebhookReceiver(options);
}

/**
 * Options of a framework binding for one source (`webhooks` of idem/node-http, idem/hono and
 * idem/express, `webhookHandler` of idem/fastify).
 */
export interface WebhookRouteOptions {
  /** The receiver that verifies and stores deliveries (`createWebhookReceiver`). */
  receiver: WebhookReceiver;
  /** The source (a key of the receiver's `sources`) this route receives. */
  source: string;
}

/** The `traceparent` and `idem-intent` a request arrived with (invalid values are dropped). */
function requestCause(headers: WebhookHeaders): Causation {
  return causationFromHeaders({
    [causationHeaders.traceparent]: headers.get(causationHeaders.traceparent),
    [causationHeaders.intent]: headers.get(causationHeaders.intent),
  });
}
