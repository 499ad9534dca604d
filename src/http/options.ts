import { unheardEvents, type IdemEvents } from '../core/event-channel.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { ResourcePointer } from '../core/errors.js';
import type { Idem } from '../operations/idem.js';
import type { ReadFirst, Recording, RetentionPolicy } from '../operations/options.js';
import type { CapturedResponse } from './captured-response.js';
import { defaultProblemTypeBase } from './problem.js';
import { defaultReplayHeaders, neverReplayed } from './response-headers.js';

/** What to do with a response the handler produced. */
export type StoreDecision = 'completed' | 'refused' | 'discard';

// Its own module, so that problem.ts (which options.ts reads a default from) need not import this one.
export type { CapturedResponse } from './captured-response.js';

/** What a request is, as the option callbacks see it. */
export interface RouteInfo {
  /** Upper-case method, e.g. `POST`. */
  method: string;
  /** The route pattern the framework matched, e.g. `/orders/:id` (not the raw URL). */
  route: string;
  /** The raw path, e.g. `/orders/17`. */
  path: string;
}

/** Options shared by every integration. `Req` is the framework's own request (or context) type. */
export interface IdempotencyOptions<Req, Client = unknown> {
  /** The keyed-operation engine, from `createIdem`. Required. */
  idem: Idem<Client>;
  /**
   * Who the key belongs to, usually the authenticated account (`req.user.accountId`). Keys never
   * cross tenants: tenant B sending tenant A's key runs its own operation. Return `undefined` to
   * answer 400 `tenant-missing`. Required unless `singleTenant` is true.
   */
  tenant?: (req: Req) => string | undefined | Promise<string | undefined>;
  /**
   * Explicit opt-out of tenant scoping for a service with one tenant: every key is stored under the
   * tenant `"default"`. Default false. Setting neither `tenant` nor `singleTenant` is a setup error,
   * so a multi-tenant service cannot forget the scope by accident.
   */
  singleTenant?: boolean;
  /**
   * The operation name keys are scoped by. Default: method and route pattern, e.g.
   * `POST /orders/:id`. Override it when one intent is reachable by several routes, or to keep
   * keys valid across a route rename.
   */
  operation?: string | ((req: Req, route: RouteInfo) => string);
  /** Methods the contract covers; others pass straight through. Default `['POST', 'PATCH']`. */
  methods?: readonly string[];
  /**
   * Whether a covered request without a key is refused with 400 `key-missing`. Default true. When
   * false, such a request runs the handler without idempotency (and without `idem` on the request).
   */
  required?: boolean;
  /**
   * The request header that carries the key. Default `Idempotency-Key`. (The same name as the
   * outgoing client's option, `createResilientClient({ keyHeader })`.)
   */
  keyHeader?: string;
  /**
   * Largest request body accepted, in bytes. A larger body is answered 413 `body-too-large` before
   * anything is stored or the handler runs. Default 1 MiB (1 048 576). It only ever adds a limit:
   * a smaller one of the framework's (Fastify's server, route or parser `bodyLimit`, a body parser
   * mounted first, `hono/body-limit` registered first) still applies; see docs/guide/http.md, Limits.
   */
  maxBodyBytes?: number;
  /** What goes into the request fingerprint besides method, route, path and query. */
  fingerprint?: {
    /**
     * Dotted paths inside the parsed body left out of the fingerprint, e.g. `['clientTime']`, for
     * fields that legitimately differ between retries of one intent. Default none.
     */
    exclude?: readonly string[];
    /** Whether the query string is part of the fingerprint. Default true. */
    query?: boolean;
  };
  /**
   * Response headers stored and replayed (case-insensitive). Default: `content-type`,
   * `content-language`, `content-encoding`, `content-disposition`, `content-location`, `location`,
   * `link`, `etag`, `last-modified`, `cache-control`, `expires`, `vary`. `set-cookie` is replayed
   * only when listed here. `date`, `content-length` and hop-by-hop headers are never stored; listing
   * them is a setup error.
   */
  replayHeaders?: readonly string[];
  /**
   * Which handler responses are stored. Default: 2xx and 3xx are stored as completed; 4xx are
   * stored as business refusals (a declined card is answered the same way on every retry), except
   * 408, 409, 425 and 429, which are transient; 5xx are not stored. A response that is not stored
   * is sent as it is and the handler's writes are rolled back, so the retry runs afresh.
   */
  store?: (status: number) => StoreDecision;
  /**
   * How long a request waits for a concurrent execution of the same key before 409 `in-progress`
   * with `Retry-After`. Default: the `waitMs` of the Idem instance (5000 ms).
   */
  waitMs?: number;
  /** Retention of stored responses for these routes. Default: the Idem instance's. */
  retention?: Partial<RetentionPolicy>;
  /**
   * `transaction` (default): the handler gets `idem.tx`; its writes, the key and the stored response
   * commit together, and the transaction stays open while the handler runs. `steps`: for handlers
   * that call external services; the handler gets `idem.step(name, fn)` (a short local
   * transaction) and `idem.call(name, fn)` (an external call with no transaction held), with
   * recovery points, derived keys and a lease, and a crashed request is resumed by the client's
   * retry.
   */
  mode?: 'transaction' | 'steps';
  /**
   * How a `transaction`-mode route records its key (`steps` always claims first). Default: the
   * Idem instance's `recording`, which defaults to `'commit'`.
   *
   * `'commit'`: the response is stored by one INSERT at the end of the handler's transaction. A
   * concurrent duplicate runs its handler too; when it reaches the stored record its writes roll
   * back and it answers the stored response (`Idempotent-Replayed: true`). Whichever commits first
   * wins, so a duplicate that started later may be the one whose response is stored; a duplicate
   * with another body is answered 422 and rolled back. A 409 `in-progress` then only comes from a
   * key that another request is completing at that very moment (or a steps-mode route holding it).
   *
   * `'claim'`: the key is claimed before the handler runs; a concurrent duplicate waits up to
   * `waitMs` for it, then answers 409 with `Retry-After`, without running its handler. Choose it
   * for handlers whose duplicate runs are expensive.
   */
  recording?: Recording;
  /**
   * Whether a `transaction`-mode request reads its key before running the handler. The read
   * answers a retry with no transaction and without running its handler; without it, a retry runs
   * the handler in a transaction that rolls back when it finds the stored response, which it
   * sends. Default `'auto'`: the route reads while more than one request in ten recently found its
   * key stored (a client retrying through timeouts and lost responses), and skips the read, one
   * statement of every first request, while first requests dominate. It starts on, and learns from
   * the conflicts at commit when it is off. `true` always reads; `false` never does. See
   * `IdemOptions.readFirst` and docs/operations/benchmarks.md for the figures.
   */
  readFirst?: ReadFirst;
  /**
   * What the key's tombstone points at once the stored response has expired. Default: the
   * response's `Location` header, as `{ type: 'location', id: <Location> }`. A handler can also
   * call `idem.setResource()`.
   */
  resource?: (response: CapturedResponse) => ResourcePointer | null;
  /** Prefix of the problem `type` URIs. Default `urn:idem:problem:`. */
  problemTypeBase?: string;
  /**
   * Where the failures idem answers 500 or 503 for are reported, as `error` events (source `http`,
   * or `nestjs`; `where` e.g. `handler`, `commit`, `store`). Default: the channel of `idem` (its
   * `events` option), where an `error` nobody listens to is written to stderr, one line.
   */
  events?: IdemEvents;
}

/** Options with every default applied and checked. */
export interface ResolvedOptions<Req, Client> {
  idem: Idem<Client>;
  tenant: (req: Req) => string | undefined | Promise<string | undefined>;
  operation: string | ((req: Req, route: RouteInfo) => string) | undefined;
  methods: ReadonlySet<string>;
  required: boolean;
  /** Lower-cased. */
  keyHeader: string;
  maxBodyBytes: number;
  exclude: readonly string[];
  includeQuery: boolean;
  replayHeaders: ReadonlySet<string>;
  store: (status: number) => StoreDecision;
  waitMs: number | undefined;
  retention: Partial<RetentionPolicy> | undefined;
  mode: 'transaction' | 'steps';
  recording: Recording | undefined;
  readFirst: ReadFirst;
  resource: (response: CapturedResponse) => ResourcePointer | null;
  problemTypeBase: string;
  events: IdemEvents;
}

export const singleTenantId = 'default';
export const defaultMaxBodyBytes = 1_048_576;

export function defaultStore(status: number): StoreDecision {
  if (status >= 500) return 'discard';
  if (status >= 400) return transientClientStatuses.has(status) ? 'discard' : 'refused';
  return 'completed';
}

const transientClientStatuses = new Set([408, 409, 425, 429]);

function locationResource(response: CapturedResponse): ResourcePointer | null {
  const location = response.headers.find(([name]) => name === 'location');
  return location ? { type: 'location', id: location[1] } : null;
}

export function resolveOptions<Req, Client>(
  options: IdempotencyOptions<Req, Client>,
): ResolvedOptions<Req, Client> {
  if (!options || typeof options.idem?.run !== 'function') {
    throw new InvalidArgumentError('idempotency options need `idem` (from createIdem)');
  }
  if (options.tenant && options.singleTenant) {
    throw new InvalidArgumentError('give either `tenant` or `singleTenant: true`, not both');
  }
  if (!options.tenant && options.singleTenant !== true) {
    throw new InvalidArgumentError(
      'idempotency keys are scoped by tenant: give `tenant: (req) => accountId`, ' +
        'or opt out explicitly with `singleTenant: true`',
    );
  }
  const maxBodyBytes = options.maxBodyBytes ?? defaultMaxBodyBytes;
  if (!(Number.isInteger(maxBodyBytes) && maxBodyBytes > 0)) {
    throw new InvalidArgumentError('maxBodyBytes must be a positive integer');
  }
  if (options.waitMs !== undefined && !(Number.isFinite(options.waitMs) && options.waitMs >= 0)) {
    throw new InvalidArgumentError('waitMs must be zero or more');
  }
  const replayHeaders = new Set((options.replayHeaders ?? defaultReplayHeaders).map((h) => h.toLowerCase()));
  for (const name of replayHeaders) {
    if (neverReplayed.has(name)) {
      throw new InvalidArgumentError(`the ${name} header is never replayed; remove it from replayHeaders`);
    }
  }
  const methods = new Set((options.methods ?? ['POST', 'PATCH']).map((m) => m.toUpperCase()));
  const keyHeader = options.keyHeader ?? 'Idempotency-Key';
  if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(keyHeader)) {
    throw new InvalidArgumentError('keyHeader must be a valid HTTP field name');
  }
  const mode = options.mode ?? 'transaction';
  if (mode !== 'transaction' && mode !== 'steps') {
    throw new InvalidArgumentError("mode must be 'transaction' or 'steps'");
  }
  return {
    idem: options.idem,
    tenant: options.tenant ?? (() => singleTenantId),
    operation: options.operation,
    methods,
    required: options.required ?? true,
    keyHeader: keyHeader.toLowerCase(),
    maxBodyBytes,
    exclude: options.fingerprint?.exclude ?? [],
    includeQuery: options.fingerprint?.query ?? true,
    replayHeaders,
    store: options.store ?? defaultStore,
    waitMs: options.waitMs,
    retention: options.retention,
    mode,
    recording: options.recording,
    readFirst: options.readFirst ?? 'auto',
    resource: options.resource ?? locationResource,
    problemTypeBase: options.problemTypeBase ?? defaultProblemTypeBase,
    // An `idem` made by hand (a test double) may have no channel.
    events: options.events ?? options.idem.events ?? unheardEvents,
  };
}
