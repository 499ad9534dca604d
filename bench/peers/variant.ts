/**
 * One way of running the keyed operation: the plain handler, idem, or a peer library, called as a
 * function or served by Express. Every variant wraps the same business handler (business.ts) and
 * runs in the same process against the same database.
 */
import type { Faults, OrderPayload } from './business.js';
import type { PeerEnvironment } from './environment.js';

export type Layout = 'function' | 'http';

/** What a caller saw: `ok` for a success (first execution or replay), else what refused it. */
export interface Answer {
  ok: boolean;
  /** The HTTP status, or the library's error name or code, e.g. `IdempotencyAlreadyInProgressError`. */
  status: string;
}

export interface VariantOptions {
  env: PeerEnvironment;
  faults?: Faults;
  /**
   * How long a peer treats an unfinished record as in progress before another request may take it
   * over (Powertools: the Lambda's remaining time; @node-idempotency: its record TTL). The crash
   * drill shortens it so the retry's outcome shows within seconds. Default: each peer's own default.
   */
  inProgressMs?: number;
  /** HTTP variants: connections of the client pool. Default 32. */
  clientConnections?: number;
}

export interface RunningVariant {
  /** One request of the keyed operation. Never throws: failures come back as an answer. */
  call(key: string, payload: OrderPayload): Promise<Answer>;
  close(): Promise<void>;
}

export interface Variant {
  id: string;
  /** Human name for the report, e.g. `Powertools (Redis)`. */
  label: string;
  layout: Layout;
  /** What this variant does against duplicates, and where its record lives. For the report notes. */
  mechanism: string;
  start(options: VariantOptions): Promise<RunningVariant>;
}

export const succeeded = (status = 'ok'): Answer => ({ ok: true, status });

/** An error as an answer: its stable code if it has one, else its class name. */
export function refused(error: unknown): Answer {
  if (error && typeof error === 'object') {
    const { code, name } = error as { code?: unknown; name?: unknown };
    if (typeof code === 'string') return { ok: false, status: code };
    if (typeof name === 'string') return { ok: false, status: name };
  }
  return { ok: false, status: 'error' };
}
