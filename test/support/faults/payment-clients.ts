/**
 * Clients of the payments demo as real clients behave under a faulty database link: each intent is
 * a new payment (its own customer, so every effect of it can be counted) under one
 * Idempotency-Key, sent again with the SAME key after a network error, a timeout, a 409 or any 5xx
 * (a 500 too: it is recorded as a violation, and retried as clients do), until a final answer
 * (201, 402, another 4xx) or a deadline. Everything a client saw is kept for the report.
 */
import { randomUUID } from 'node:crypto';

export interface Intent {
  key: string;
  customer: string;
  amount: number;
  /** When its first attempt was sent, and when its final answer came (ms since epoch). */
  startedAt: number;
  finishedAt: number | undefined;
  attempts: number;
  finalStatus: number | undefined;
  finalBody: string | undefined;
  paymentId: string | undefined;
  /** Every answer before the final one: a status, `network` or `timeout`. */
  seen: string[];
  /** No final answer before the deadline. */
  unresolved: boolean;
}

/** A 5xx other than 503 (or a 503 without Retry-After): what must never happen. */
export interface Violation {
  key: string;
  at: number;
  status: number;
  retryAfter: string | null;
  body: string;
}

export interface ClientLog {
  intents: Intent[];
  /** Answers by status (`201`, `503`, `network`, `timeout`, …), every attempt counted. */
  byStatus: Map<string, number>;
  violations: Violation[];
  /** A few 503 problem bodies, as samples. */
  samples503: string[];
  /** Network errors by cause code, for the report. */
  networkCauses: Map<string, number>;
  /** Attempts the demo did not answer within the client's timeout: held, not refused. */
  held: { key: string; at: number; ms: number }[];
  /** Attempts answered after more than 5 s: when, how long, with what. */
  slow: { key: string; at: number; ms: number; status: number; body: string }[];
}

export function newClientLog(): ClientLog {
  return {
    intents: [],
    byStatus: new Map(),
    violations: [],
    samples503: [],
    networkCauses: new Map(),
    held: [],
    slow: [],
  };
}

export interface PayOptions {
  /** Bound on one attempt (the client's own request timeout). Default 20 s. */
  attemptTimeoutMs?: number;
  /** Bound on the whole intent. Default 60 s. */
  deadlineMs?: number;
  /** Cap on the wait before a retry, whatever Retry-After says. Default 1000 ms. */
  maxBackoffMs?: number;
  tenant?: string;
  /** Count an attempt that times out as `held` (default true; a probe's short attempts are not). */
  recordHeld?: boolean;
}

const bump = (map: Map<string, number>, key: string) => map.set(key, (map.get(key) ?? 0) + 1);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function causeCode(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message?.slice(0, 40) ?? (error as Error).name;
}

export function newIntent(prefix: string): Intent {
  const id = randomUUID();
  return {
    key: `${prefix}-${id}`,
    customer: `${prefix}_${id.slice(0, 13)}`,
    amount: 100 + Math.floor(Math.random() * 10_000),
    startedAt: Date.now(),
    finishedAt: undefined,
    attempts: 0,
    finalStatus: undefined,
    finalBody: undefined,
    paymentId: undefined,
    seen: [],
    unresolved: false,
  };
}

/** One attempt of an intent: its status (with the body and Retry-After), or `timeout` / `network`. */
export async function attemptOnce(
  base: string,
  intent: Intent,
  timeoutMs: number,
  tenant = 'acme',
): Promise<{ status: string; body?: string; retryAfter?: string | null; cause?: string }> {
  try {
    const response = await fetch(`${base}/v1/payments`, {
      method: 'POST',
      headers: {
        authorization: `Bearer sk_test_${tenant}`,
        'content-type': 'application/json',
        'idempotency-key': intent.key,
      },
      body: JSON.stringify({ amount: intent.amount, currency: 'eur', customer: intent.customer }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const body = await response.text();
    return { status: String(response.status), body, retryAfter: response.headers.get('retry-after') };
  } catch (error) {
    if ((error as Error).name === 'TimeoutError') return { status: 'timeout' };
    return { status: 'network', cause: causeCode(error) };
  }
}

/** Sends one intent until it has a final answer or its deadline passes. */
export async function pay(base: string, intent: Intent, log: ClientLog, options: PayOptions = {}) {
  const attemptTimeoutMs = options.attemptTimeoutMs ?? 20_000;
  const deadline = intent.startedAt + (options.deadlineMs ?? 60_000);
  const maxBackoffMs = options.maxBackoffMs ?? 1000;
  const body = JSON.stringify({ amount: intent.amount, currency: 'eur', customer: intent.customer });
  for (;;) {
    if (Date.now() > deadline) {
      intent.unresolved = true;
      return intent;
    }
    intent.attempts++;
    let response: Response;
    let text: string;
    const sent = Date.now();
    try {
      response = await fetch(`${base}/v1/payments`, {
        method: 'POST',
        headers: {
          authorization: `Bearer sk_test_${options.tenant ?? 'acme'}`,
          'content-type': 'application/json',
          'idempotency-key': intent.key,
        },
        body,
        signal: AbortSignal.timeout(Math.max(1, Math.min(attemptTimeoutMs, deadline - Date.now()))),
      });
      text = await response.text();
    } catch (error) {
      const timedOut = (error as Error).name === 'TimeoutError';
      const what = timedOut ? 'timeout' : 'network';
      intent.seen.push(what);
      bump(log.byStatus, what);
      if (!timedOut) bump(log.networkCauses, causeCode(error));
      else if (options.recordHeld !== false)
        log.held.push({ key: intent.key, at: sent, ms: Date.now() - sent });
      await sleep(100 + Math.random() * 100);
      continue;
    }
    const status = response.status;
    bump(log.byStatus, String(status));
    if (Date.now() - sent > 5000)
      log.slow.push({ key: intent.key, at: sent, ms: Date.now() - sent, status, body: text.slice(0, 300) });
    const retryAfter = response.headers.get('retry-after');
    if (status >= 500 && (status !== 503 || retryAfter === null)) {
      log.violations.push({ key: intent.key, at: Date.now(), status, retryAfter, body: text.slice(0, 1000) });
    }
    if (status === 503 && log.samples503.length < 5 && !log.samples503.includes(text)) {
      log.samples503.push(text.slice(0, 500));
    }
    if (status === 409 || status >= 500) {
      intent.seen.push(String(status));
      const wait = Math.min(Number(retryAfter ?? 0) * 1000 || 100, maxBackoffMs);
      await sleep(wait / 2 + Math.random() * (wait / 2));
      continue;
    }
    intent.finalStatus = status;
    intent.finalBody = text;
    intent.finishedAt = Date.now();
    if (status === 201 || status === 402) {
      try {
        const parsed = JSON.parse(text) as { id?: string; payment?: { id?: string } };
        intent.paymentId = parsed.id ?? parsed.payment?.id;
      } catch {
        // reported by the verdict: a final answer without a payment id
      }
    }
    return intent;
  }
}

/**
 * `clients` loops, each sending one intent after another while `running()` is true; resolves once
 * every loop has its current intent settled.
 */
export async function runClients(
  base: () => string,
  clients: number,
  running: () => boolean,
  log: ClientLog,
  options: PayOptions & { prefix?: string } = {},
): Promise<void> {
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      while (running()) {
        const intent = newIntent(`${options.prefix ?? 'pay'}${c}`);
        log.intents.push(intent);
        await pay(base(), intent, log, options);
      }
    }),
  );
}

/**
 * How long after `since` the demo took a new payment: fresh intents, each attempt bounded by
 * `attemptTimeoutMs`, until one is answered 201. The intent is returned for the verdict.
 */
export async function timeToNewPayment(
  base: string,
  since: number,
  log: ClientLog,
  options: { attemptTimeoutMs?: number; deadlineMs?: number } = {},
): Promise<{ ms: number | undefined; intent: Intent }> {
  const intent = newIntent('probe');
  log.intents.push(intent);
  await pay(base, intent, log, {
    attemptTimeoutMs: options.attemptTimeoutMs ?? 3000,
    deadlineMs: options.deadlineMs ?? 60_000,
    maxBackoffMs: 100,
    recordHeld: false,
  });
  return { ms: intent.finalStatus === 201 ? intent.finishedAt! - since : undefined, intent };
}

export function statusLine(log: ClientLog): string {
  return [...log.byStatus.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}×${v}`)
    .join(' ');
}
