/** Answers as the receiver gives them to a framework adapter, and RFC 9457 problem documents. */
import { problemJson, problemMediaType } from '../core/problem-type.js';
import { isRawBodyUnavailable, isWebhookUnauthorized, type WebhookRequestError } from './errors.js';

/** What to send back: status, headers and body text. */
export interface WebhookAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** An `application/problem+json` answer. `detail` must never hold a header value or a secret. */
export function problemAnswer(
  status: number,
  slug: string,
  title: string,
  extra: Record<string, string | number | boolean> = {},
): WebhookAnswer {
  return {
    status,
    headers: { 'content-type': problemMediaType },
    body: problemJson(slug, title, status, extra),
  };
}

const slugs: Record<WebhookRequestError['code'], string> = {
  IDEM_WEBHOOK_UNAUTHORIZED: 'webhook-unauthorized',
  IDEM_WEBHOOK_MALFORMED: 'webhook-malformed',
  IDEM_WEBHOOK_TOO_LARGE: 'webhook-too-large',
  IDEM_WEBHOOK_RAW_BODY: 'webhook-raw-body-unavailable',
};

/** The problem answer of a typed receiver error. Its message is safe by construction. */
export function errorAnswer(error: WebhookRequestError): WebhookAnswer {
  const extra: Record<string, string> = { code: error.code, detail: error.message };
  if (isWebhookUnauthorized(error)) extra.reason = error.reason;
  const titles: Record<WebhookRequestError['code'], string> = {
    IDEM_WEBHOOK_UNAUTHORIZED: 'Webhook signature not verified',
    IDEM_WEBHOOK_MALFORMED: 'Malformed webhook request',
    IDEM_WEBHOOK_TOO_LARGE: 'Webhook body too large',
    IDEM_WEBHOOK_RAW_BODY: 'Webhook body unavailable for verification',
  };
  const answer = problemAnswer(error.status, slugs[error.code], titles[error.code], extra);
  if (isRawBodyUnavailable(error)) answer.headers['cache-control'] = 'no-store';
  return answer;
}
