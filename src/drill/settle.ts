/**
 * Retrying "still in progress" answers. A correct server may answer a duplicate that arrives while
 * the first is running with 409 (idem, Stripe) or 425/429 and a `Retry-After`; a client is meant to
 * try again, so the drills do, and judge the answer the retries settle on.
 */
import type { Answer, DrillClient, OutgoingRequest } from './http-client.js';

const inProgressStatuses = new Set([409, 425, 429]);

/** Longest wait between tries: `Retry-After` is honoured up to this, to keep drills short. */
const maxWaitMs = 1000;

export interface Settled {
  /** The last answer. */
  answer: Answer;
  /** Every status seen, in order (`[409, 409, 201]`). */
  statuses: number[];
}

/** Sends until the answer is not an in-progress refusal, or `budgetMs` has passed. */
export async function sendSettled(
  client: DrillClient,
  request: OutgoingRequest,
  budgetMs: number,
): Promise<Settled> {
  const deadline = performance.now() + budgetMs;
  const statuses: number[] = [];
  // Bounded twice: by the time budget and by a try count (50 tries at >= 50 ms is >= 2.5 s).
  for (let attempt = 0; ; attempt++) {
    const answer = await client.send(request);
    statuses.push(answer.status);
    if (!inProgressStatuses.has(answer.status) || attempt >= 49) return { answer, statuses };
    const wait = retryAfterMs(answer) ?? Math.min(50 * 2 ** attempt, 400);
    if (performance.now() + wait >= deadline) return { answer, statuses };
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/** `Retry-After` in ms (delta-seconds or an HTTP date), clamped to 50..1000; undefined when absent. */
export function retryAfterMs(answer: Answer, now = Date.now()): number | undefined {
  const raw = answer.headers['retry-after']?.trim();
  if (!raw) return undefined;
  const ms = /^\d+$/.test(raw) ? Number(raw) * 1000 : Date.parse(raw) - now;
  if (!Number.isFinite(ms)) return undefined;
  return Math.min(Math.max(ms, 50), maxWaitMs);
}
