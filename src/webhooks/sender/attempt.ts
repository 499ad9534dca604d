/**
 * One claimed delivery, attempted: signed with every secret of its endpoint, sent through the
 * endpoint's circuit breaker, and settled in one transaction with its logged attempt: delivered,
 * retried on the backoff (never earlier than a `Retry-After` asks, capped at `maxRetryAfterMs`),
 * failed, or gone (410: the endpoint is disabled and its pending deliveries cancelled).
 */
import { performance } from 'node:perf_hooks';
import { ConsecutiveBreaker } from 'cockatiel';
import { headersOf } from '../../core/causation.js';
import type { Clock } from '../../core/clock.js';
import type { IdemEvents } from '../../core/event-channel.js';
import type { Backoff } from '../../core/resilience/backoff.js';
import { CircuitBreaker, isCircuitOpen } from '../../core/resilience/circuit-breaker.js';
import { isUnhealthyStatus } from '../../core/resilience/http-failure.js';
import { parseRetryAfter, retryDelay } from '../../core/resilience/retry-after.js';
import type { Sql } from '../../core/sql.js';
import { errorMessage } from '../error-message.js';
import type { AttemptResult, ClaimedDelivery } from './delivery.js';
import { isDestinationRefused } from './destination.js';
import type { ResolvedSenderOptions } from './options.js';
import { parseSigningSecret, signatureHeader, type SigningKey } from './sign.js';
import type { SenderStatements } from './statements.js';
import type { AttemptTransport } from './transport.js';

/** The delivery an event of the sender is about, and the attempt that ended. */
export interface WebhookDeliveryRef {
  /** The tenant of the message and its endpoint (`''`: the default tenant). */
  tenant: string;
  messageId: string;
  endpointId: string;
  /** The attempt, the first being 1. */
  attempt: number;
}

declare module '../../core/event-channel.js' {
  interface IdemEventMap {
    /** An attempt was answered 2xx, after it was recorded: the delivery is done. */
    'webhook:delivered': WebhookDeliveryRef & { status: number; latencyMs: number };
    /**
     * An attempt failed (a status other than 2xx and 410, a network error, a timeout, a refused
     * destination). `final`: no attempt is left (or a refused destination, never retried) and the
     * delivery is `failed`; otherwise it is tried again at `nextAttemptAt` (epoch ms). `status` is
     * null when no answer came; `error` is the message stored with the attempt.
     */
    'webhook:delivery-failed': WebhookDeliveryRef & {
      status: number | null;
      error: string;
      final: boolean;
      nextAttemptAt?: number;
      latencyMs?: number;
    };
    /**
     * The endpoint answered 410 Gone: it is disabled and its pending deliveries are cancelled (an
     * operator enables it again).
     */
    'webhook:endpoint-disabled': WebhookDeliveryRef & { status: 410; reason: string };
  }
}

export class DeliveryAttempts<Client> {
  private readonly breakers = new Map<string, CircuitBreaker>();
  private readonly keys = new Map<string, SigningKey>();

  constructor(
    private readonly sql: Sql<Client>,
    private readonly statements: SenderStatements,
    private readonly clock: Clock,
    private readonly options: ResolvedSenderOptions,
    private readonly backoff: Backoff,
    private readonly transport: AttemptTransport,
    private readonly events: IdemEvents,
  ) {}

  async attempt(row: ClaimedDelivery): Promise<AttemptResult> {
    const base = {
      tenant: row.tenant_id,
      messageId: row.message_id,
      endpointId: row.endpoint_id,
      attempt: row.attempts,
    };
    if (!row.enabled) {
      await this.statements.release(this.sql, {
        delivery: row,
        state: 'cancelled',
        next: new Date(this.clock.now()),
        error: 'endpoint disabled',
      });
      return { ...base, outcome: 'cancelled' };
    }
    if (row.attempts > this.options.maxAttempts) {
      // Only after lost workers: each claim counted an attempt that never reported back.
      const error = 'attempts exhausted: the workers that claimed it never finished';
      await this.settle(row, 'failed', null, error);
      this.events.emit('webhook:delivery-failed', { ...base, status: null, error, final: true });
      return { ...base, outcome: 'failed' };
    }

    const startedAt = this.clock.now();
    const timestamp = Math.floor(startedAt / 1000);
    const body = row.payload;
    const headers: Record<string, string> = {
      'content-type': row.content_type,
      'user-agent': this.options.userAgent,
      'webhook-id': row.message_id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signatureHeader(
        row.secrets.map((s) => this.signingKey(s)),
        row.message_id,
        timestamp,
        body,
      ),
      // The receiver joins the trace of the intent that enqueued the message (docs/trace.md).
      ...headersOf({ intent: row.intent ?? null, traceparent: row.traceparent ?? null }),
    };

    const breaker = this.breakerFor(row.tenant_id, row.endpoint_id);
    const t0 = performance.now();
    let status: number | undefined;
    let retryAfterHeader: string | undefined;
    let failure: unknown;
    try {
      const send = () => this.transport.post(row.url, headers, body);
      const answer = breaker
        ? await breaker.execute(send, (outcome) =>
            // A refused destination is no sign of the endpoint's health: it fails on its own, at once.
            'error' in outcome
              ? !isDestinationRefused(outcome.error)
              : isUnhealthyStatus(outcome.value.status),
          )
        : await send();
      status = answer.status;
      retryAfterHeader = answer.retryAfter;
    } catch (error) {
      if (isCircuitOpen(error)) {
        const next = new Date(
          this.clock.now() + (this.options.breaker ? this.options.breaker.halfOpenAfterMs : 0),
        );
        await this.statements.release(this.sql, {
          delivery: row,
          state: 'pending',
          next,
          error: 'circuit open: endpoint failing',
        });
        return { ...base, outcome: 'circuit-open', nextAttemptAt: next.getTime() };
      }
      failure = error;
    }
    const latencyMs = performance.now() - t0;
    const now = this.clock.now();

    let outcome: 'delivered' | 'retry' | 'failed' | 'gone';
    let retryAfterMs: number | undefined;
    let next = new Date(now);
    if (status !== undefined && status >= 200 && status < 300) outcome = 'delivered';
    else if (status === 410) outcome = 'gone';
    // Not retried: the same URL resolves to the same kind of address until someone changes it.
    else if (isDestinationRefused(failure)) outcome = 'failed';
    else {
      retryAfterMs = parseRetryAfter(retryAfterHeader, now);
      if (retryAfterMs !== undefined) retryAfterMs = Math.min(retryAfterMs, this.options.maxRetryAfterMs);
      if (row.attempts >= this.options.maxAttempts) outcome = 'failed';
      else {
        outcome = 'retry';
        next = new Date(
          now + retryDelay(this.backoff(row.attempts), retryAfterMs, this.options.maxRetryAfterMs),
        );
      }
    }
    const error =
      failure !== undefined ? errorMessage(failure) : outcome === 'delivered' ? null : `HTTP ${status}`;

    await this.sql.transaction(async (tx) => {
      await this.statements.recordAttempt(tx, {
        delivery: row,
        startedAt: new Date(startedAt),
        status: status ?? null,
        latencyMs,
        outcome,
        error,
        retryAfterMs: retryAfterMs ?? null,
      });
      const state = outcome === 'retry' ? 'pending' : outcome === 'gone' ? 'cancelled' : outcome;
      await this.statements.settle(tx, {
        delivery: row,
        state,
        next,
        status: status ?? null,
        error,
        now: new Date(now),
      });
      if (outcome === 'gone') {
        const endpoint = { tenant: row.tenant_id, id: row.endpoint_id };
        await this.statements.disableEndpoint(tx, {
          ...endpoint,
          reason: 'gone: the endpoint answered 410',
          now: new Date(now),
        });
        await this.statements.cancelEndpointDeliveries(tx, {
          ...endpoint,
          error: 'endpoint disabled: it answered 410 Gone',
        });
      }
    });

    const reported = Math.round(latencyMs);
    if (outcome === 'delivered')
      this.events.emit('webhook:delivered', { ...base, status: status!, latencyMs: reported });
    else if (outcome === 'gone')
      this.events.emit('webhook:endpoint-disabled', {
        ...base,
        status: 410,
        reason: 'gone: the endpoint answered 410',
      });
    else
      this.events.emit('webhook:delivery-failed', {
        ...base,
        status: status ?? null,
        error: error!,
        final: outcome === 'failed',
        ...(outcome === 'retry' ? { nextAttemptAt: next.getTime() } : {}),
        latencyMs: reported,
      });
    return {
      ...base,
      outcome,
      status,
      latencyMs,
      ...(outcome === 'retry' ? { nextAttemptAt: next.getTime() } : {}),
    };
  }

  private async settle(
    row: ClaimedDelivery,
    state: string,
    status: number | null,
    error: string,
  ): Promise<void> {
    const now = new Date(this.clock.now());
    await this.statements.settle(this.sql, { delivery: row, state, next: now, status, error, now });
  }

  /** The breaker of one endpoint (in this process), or none when breakers are off. */
  private breakerFor(tenant: string, endpointId: string): CircuitBreaker | undefined {
    if (this.options.breaker === false) return undefined;
    const key = `${tenant}\u0000${endpointId}`;
    let breaker = this.breakers.get(key);
    if (!breaker) {
      breaker = new CircuitBreaker(endpointId, {
        clock: this.clock,
        halfOpenAfterMs: this.options.breaker.halfOpenAfterMs,
        breaker: new ConsecutiveBreaker(this.options.breaker.consecutiveFailures),
      });
      this.breakers.set(key, breaker);
    }
    return breaker;
  }

  private signingKey(secret: string): SigningKey {
    let key = this.keys.get(secret);
    if (!key) {
      key = parseSigningSecret(secret);
      this.keys.set(secret, key);
    }
    return key;
  }
}
