/**
 * Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>[,v1=…]` over `${t}.${body}`,
 * keyed by the endpoint secret (`whsec_…`) used as UTF-8 text, exactly as Stripe's own libraries
 * do. While a secret is rolled Stripe sends one `v1` per active secret. The dedupe key is the event
 * id (`evt_…`) from the verified body: Stripe retries an event with the same id for up to 3 days.
 */
import { WebhookMalformedError, WebhookUnauthorizedError } from '../errors.js';
import {
  defaultRetentionMs,
  eventTypeOf,
  hmacSha256Check,
  jsonObject,
  resolveTolerance,
  signedWithin,
  utf8Keys,
  validateDeliveryId,
} from './common.js';
import type { Secret, ToleranceOptions, VerifiedDelivery, WebhookRequest, WebhookVerifier } from './types.js';

/** Options of `createStripeVerifier`. */
export interface StripeOptions extends ToleranceOptions {
  /** Endpoint secrets (`whsec_…`), used as text. List the old and the new one while rolling. */
  secrets: Secret[];
  /** Receipt retention. Default 4 days: Stripe retries for up to 3 days, plus one day of margin. */
  retentionMs?: number;
}

const signatureHeader = 'stripe-signature';

/** Verifies Stripe's `Stripe-Signature`. */
export function createStripeVerifier(options: StripeOptions): WebhookVerifier {
  const keys = utf8Keys(options.secrets, 'createStripeVerifier');
  const tolerance = resolveTolerance(options, 'createStripeVerifier');
  return {
    scheme: 'stripe',
    retentionMs: options.retentionMs ?? defaultRetentionMs,
    storedHeaders: ['content-type', 'user-agent'],
    signatureHeaders: [signatureHeader],
    verify(request: WebhookRequest, now: number): VerifiedDelivery {
      const header = request.headers.get(signatureHeader);
      if (header === undefined || header.trim() === '')
        throw new WebhookUnauthorizedError('signature-missing');
      let timestamp: string | undefined;
      const v1: string[] = [];
      for (const item of header.split(',')) {
        const eq = item.indexOf('=');
        if (eq < 0) throw new WebhookMalformedError('Stripe-Signature is not a list of key=value pairs');
        const key = item.slice(0, eq).trim();
        const value = item.slice(eq + 1).trim();
        if (key === 't') {
          if (timestamp !== undefined)
            throw new WebhookMalformedError('Stripe-Signature has more than one t');
          timestamp = value;
        } else if (key === 'v1') {
          v1.push(value);
        }
      }
      if (timestamp === undefined) throw new WebhookMalformedError('Stripe-Signature has no timestamp (t)');
      const signedAt = signedWithin(timestamp, 'the Stripe-Signature timestamp', now, tolerance);
      if (v1.length === 0) throw new WebhookUnauthorizedError('signature-unsupported');

      const matches = hmacSha256Check(keys, [`${timestamp}.`, request.body], 'hex');
      if (!v1.some(matches)) throw new WebhookUnauthorizedError('signature-mismatch');

      // Only now, with the bytes authentic, is the body read for its event id.
      const event = jsonObject(request.body);
      if (!event || typeof event.id !== 'string') {
        throw new WebhookMalformedError('the Stripe event has no id');
      }
      return {
        deliveryId: validateDeliveryId(event.id, 'the Stripe event id'),
        signedAt,
        eventType: eventTypeOf(event.type),
      };
    },
  };
}
