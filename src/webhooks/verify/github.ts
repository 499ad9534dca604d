/**
 * GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, keyed by the webhook secret
 * as UTF-8. GitHub signs no timestamp, so there is no tolerance to apply: replays are stopped by
 * the dedupe key alone. One `X-GitHub-Delivery` GUID is shared by every hook that receives the same
 * event, so the dedupe key is `<X-GitHub-Hook-ID>:<X-GitHub-Delivery>`; a redelivery keeps both.
 */
import { WebhookMalformedError, WebhookUnauthorizedError } from '../errors.js';
import {
  decodeSignature,
  defaultRetentionMs,
  eventTypeOf,
  hmac,
  requireHeader,
  safeEqual,
  utf8Keys,
  validateDeliveryId,
} from './common.js';
import type { Secret, VerifiedDelivery, WebhookRequest, WebhookVerifier } from './types.js';

/** Options of `createGithubVerifier`. */
export interface GithubOptions {
  /** Webhook secrets (UTF-8 text or bytes). List the old and the new one while rotating. */
  secrets: Secret[];
  /**
   * Receipt retention. Default 4 days: GitHub lets deliveries of the past 3 days be redelivered,
   * plus one day of margin.
   */
  retentionMs?: number;
}

const signatureHeader = 'x-hub-signature-256';

/** Verifies GitHub's `X-Hub-Signature-256`. */
export function createGithubVerifier(options: GithubOptions): WebhookVerifier {
  const keys = utf8Keys(options.secrets, 'createGithubVerifier');
  return {
    scheme: 'github',
    retentionMs: options.retentionMs ?? defaultRetentionMs,
    storedHeaders: [
      'x-github-event',
      'x-github-delivery',
      'x-github-hook-id',
      'x-github-hook-installation-target-id',
      'x-github-hook-installation-target-type',
      'content-type',
      'user-agent',
    ],
    // The legacy SHA-1 header is a signature too: never stored.
    signatureHeaders: [signatureHeader, 'x-hub-signature'],
    verify(request: WebhookRequest): VerifiedDelivery {
      const header = request.headers.get(signatureHeader);
      if (header === undefined || header.trim() === '')
        throw new WebhookUnauthorizedError('signature-missing');
      const delivery = requireHeader(request.headers.get('x-github-delivery'), 'X-GitHub-Delivery');
      const hookId = requireHeader(request.headers.get('x-github-hook-id'), 'X-GitHub-Hook-ID');
      if (!/^\d{1,20}$/.test(hookId)) throw new WebhookMalformedError('X-GitHub-Hook-ID is not a number');
      const value = header.trim();
      if (!value.startsWith('sha256=')) {
        throw new WebhookMalformedError('X-Hub-Signature-256 does not start with sha256=');
      }
      const given = decodeSignature(value.slice(7), 'hex');
      if (!given || given.length !== 32) {
        throw new WebhookMalformedError('X-Hub-Signature-256 is not 64 hexadecimal digits');
      }
      const deliveryId = validateDeliveryId(`${hookId}:${delivery}`, 'X-GitHub-Hook-ID:X-GitHub-Delivery');
      for (const key of keys) {
        if (safeEqual(hmac('sha256', key, [request.body]), given)) {
          return {
            deliveryId,
            signedAt: null,
            eventType: eventTypeOf(request.headers.get('x-github-event')),
          };
        }
      }
      throw new WebhookUnauthorizedError('signature-mismatch');
    },
  };
}
