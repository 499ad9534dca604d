/**
 * A generic HMAC verifier for senders with their own scheme: the header, hash, encoding and prefix
 * are configurable, several signatures may share the header, and a signed timestamp (when the
 * sender has one) gets the same past-and-future tolerance as the standard schemes.
 */
import { getHashes } from 'node:crypto';
import { InvalidArgumentError } from '../../core/errors.js';
import { WebhookMalformedError, WebhookUnauthorizedError } from '../errors.js';
import {
  checkTolerance,
  decodeSignature,
  eventTypeOf,
  hmac,
  matchesOne,
  requireHeader,
  resolveTolerance,
  utf8Keys,
  validateDeliveryId,
  type SignatureEncoding,
} from './common.js';
import type { Secret, ToleranceOptions, VerifiedDelivery, WebhookRequest, WebhookVerifier } from './types.js';

/** The parts a sender may sign. */
export interface SignedParts {
  body: Uint8Array;
  /** The timestamp header's text, when `timestamp` is configured. */
  timestamp?: string;
  /** The delivery id, when it comes from a header. */
  deliveryId?: string;
}

/** Options of `createHmacVerifier`. */
export interface HmacOptions extends ToleranceOptions {
  /** Secrets (UTF-8 text or bytes). List the old and the new one while rotating. */
  secrets: Secret[];
  /** The header that carries the signature, e.g. `x-signature`. */
  header: string;
  /** The HMAC hash. Default `sha256`. */
  algorithm?: string;
  /** How the signature is written. Default `hex` (either case). */
  encoding?: SignatureEncoding;
  /** Text before each signature, e.g. `sha256=`. Default: none. */
  prefix?: string;
  /** When the header may hold several signatures, what separates them (e.g. `' '` or `','`). Default: one signature. */
  separator?: string;
  /** The header with the delivery id. Required unless `deliveryId` is given. */
  deliveryIdHeader?: string;
  /**
   * Reads the delivery id from the verified request (for senders that put it in the body). Runs only
   * after the signature matched. Returning `undefined` answers 400.
   */
  deliveryId?: (request: WebhookRequest) => string | undefined;
  /** The header naming the event type. Default: none (the type is `null`). */
  eventTypeHeader?: string;
  /** Reads the event type from the verified request; overrides `eventTypeHeader`. */
  eventType?: (request: WebhookRequest) => string | null | undefined;
  /**
   * When the sender signs a timestamp: its header and unit (default seconds). The tolerance applies
   * in both directions, and by default the signed content becomes `${timestamp}.${body}`.
   */
  timestamp?: { header: string; unit?: 's' | 'ms' };
  /** The signed content. Default: the body, or `${timestamp}.${body}` when `timestamp` is set. */
  signedContent?: (parts: SignedParts) => (string | Uint8Array)[];
  /** Receipt retention. Default 7 days: the sender's redelivery window is unknown here. */
  retentionMs?: number;
  /** Headers stored with the receipt. Default: the delivery id, event type and timestamp headers, content-type. */
  storedHeaders?: string[];
}

/** Verifies an HMAC signature of a configurable shape. */
export function createHmacVerifier(options: HmacOptions): WebhookVerifier {
  const keys = utf8Keys(options.secrets, 'createHmacVerifier');
  const algorithm = options.algorithm ?? 'sha256';
  if (!getHashes().includes(algorithm))
    throw new InvalidArgumentError(`createHmacVerifier: unknown hash ${algorithm}`);
  const encoding = options.encoding ?? 'hex';
  const header = options.header.toLowerCase();
  const prefix = options.prefix ?? '';
  const idHeader = options.deliveryIdHeader?.toLowerCase();
  if (!idHeader && !options.deliveryId) {
    throw new InvalidArgumentError('createHmacVerifier: give deliveryIdHeader or deliveryId');
  }
  const typeHeader = options.eventTypeHeader?.toLowerCase();
  const timestampHeader = options.timestamp?.header.toLowerCase();
  const timestampUnitMs = options.timestamp?.unit === 'ms' ? 1 : 1000;
  const tolerance = resolveTolerance(options, 'createHmacVerifier');
  const signedContent =
    options.signedContent ??
    ((parts: SignedParts) =>
      parts.timestamp !== undefined ? [`${parts.timestamp}.`, parts.body] : [parts.body]);
  const stored = options.storedHeaders?.map((h) => h.toLowerCase()) ?? [
    ...[idHeader, typeHeader, timestampHeader].filter((h): h is string => h !== undefined),
    'content-type',
  ];

  return {
    scheme: 'hmac',
    retentionMs: options.retentionMs ?? 7 * 86_400_000,
    storedHeaders: stored,
    signatureHeaders: [header],
    verify(request: WebhookRequest, now: number): VerifiedDelivery {
      const value = request.headers.get(header);
      if (value === undefined || value.trim() === '') throw new WebhookUnauthorizedError('signature-missing');
      const headerId = idHeader
        ? validateDeliveryId(requireHeader(request.headers.get(idHeader), idHeader), idHeader)
        : undefined;

      let timestamp: string | undefined;
      let signedAt: number | null = null;
      if (timestampHeader) {
        timestamp = requireHeader(request.headers.get(timestampHeader), timestampHeader);
        if (!/^\d{1,15}$/.test(timestamp))
          throw new WebhookMalformedError(`${timestampHeader} is not an integer timestamp`);
        signedAt = Number(timestamp) * timestampUnitMs;
        checkTolerance(signedAt, now, tolerance);
      }

      const given: Buffer[] = [];
      const texts = options.separator ? value.split(options.separator) : [value];
      for (const raw of texts) {
        const text = raw.trim();
        if (text === '') continue;
        if (!text.startsWith(prefix))
          throw new WebhookMalformedError(`${header} does not start with the expected prefix`);
        const decoded = decodeSignature(text.slice(prefix.length), encoding);
        if (!decoded) throw new WebhookMalformedError(`${header} is not valid ${encoding}`);
        given.push(decoded);
      }
      if (given.length === 0) throw new WebhookUnauthorizedError('signature-missing');

      const parts = signedContent({ body: request.body, timestamp, deliveryId: headerId });
      const expected = keys.map((key) => hmac(algorithm, key, parts));
      if (!given.some((sig) => matchesOne(expected, sig))) {
        throw new WebhookUnauthorizedError('signature-mismatch');
      }

      let deliveryId = headerId;
      if (options.deliveryId) {
        const fromBody = options.deliveryId(request);
        if (fromBody === undefined) throw new WebhookMalformedError('the delivery id is missing');
        deliveryId = validateDeliveryId(fromBody, 'the delivery id');
      }
      const eventType = options.eventType
        ? eventTypeOf(options.eventType(request))
        : typeHeader
          ? eventTypeOf(request.headers.get(typeHeader))
          : null;
      return { deliveryId: deliveryId!, signedAt, eventType };
    },
  };
}
