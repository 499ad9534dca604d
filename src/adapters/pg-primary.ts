/**
 * Reaching the primary of a high-availability PostgreSQL (pg_auto_failover, Patroni, a managed
 * service with several endpoints) with node-postgres, which refuses a multi-host URL and has no
 * `target_session_attrs`.
 *
 * `primaryClient(pg.Client, options)` returns a `Client` class for `new pg.Pool({ Client })`: every
 * connection the pool opens tries the hosts in turn and keeps the first one that is the primary
 * and takes writes, `pg_is_in_recovery()` false AND `transaction_read_only` off: libpq's
 * `target_session_attrs=primary` and `read-write` at once. The second test matters:
 * pg_auto_failover keeps the node it promotes read-only until the old primary is known to be
 * demoted (5–30 s), which `pg_is_in_recovery()` does not show, and writes that land there fail
 * with `25006`. (The `default_transaction_read_only` a PostgreSQL 14+ server reports at startup is
 * no substitute: a standby reports it off.) When no host qualifies, the connect fails with
 * `NoPrimaryError`, SQLSTATE `08001`: transient, so `isRetryable` and idem classify it as a failure
 * to retry with the same key, and nothing is stored.
 *
 * The pg module is never loaded here: the caller passes its `Client` class.
 *
 * @example
 * import pg from 'pg';
 * import { createIdem } from 'idem';
 * import { fromPg, primaryClient } from 'idem/pg';
 *
 * const pool = new pg.Pool({
 *   // The URL pg_autoctl prints (`pg_autoctl show uri --formation default`) works as it is.
 *   connectionString: 'postgres://app@db1:5432,db2:5432/app?target_session_attrs=read-write',
 *   Client: primaryClient(pg.Client),
 *   connectionTimeoutMillis: 5_000,
 *   keepAlive: true,
 *   maxLifetimeSeconds: 300,
 * });
 * pool.on('error', (error) => console.warn('idle connection lost', error.message));
 * const idem = createIdem({ sql: fromPg(pool) });
 */
import type { IdemEvents } from '../core/event-channel.js';

/** A host to try. */
export interface PrimaryHost {
  host: string;
  /** Default: the port of the pool's configuration, else `PGPORT`, else 5432. */
  port?: number;
}

/** Options of `primaryClient`. */
export interface PrimaryClientOptions {
  /**
   * The hosts to try, in order: `'db1'`, `'db1:5433'`, `'[::1]:5432'` or `{ host, port }`.
   *
   * Default: the hosts of the pool's `connectionString` when it names several
   * (`postgres://user@db1:5432,db2:5432/app`, libpq's multi-host form, which node-postgres
   * otherwise refuses), else the pool's `host` split at commas (`'db1,db2'`, as libpq reads
   * `PGHOST`), else the pool's single host, which makes the client a read-write check only.
   */
  hosts?: ReadonlyArray<string | PrimaryHost>;
  /**
   * How long one host may take to accept the connection and answer the check, in milliseconds.
   *
   * Default: the pool's `connectionTimeoutMillis` divided by the number of hosts, so that a round
   * over every host fits in it (pg-pool gives up on the whole connect after
   * `connectionTimeoutMillis`, and this client stops trying then), at least 250; 5000 when the pool
   * has no `connectionTimeoutMillis`. Shorter finds the primary sooner past a host that drops
   * packets (a dead host answers nothing, a stopped server refuses at once); too short refuses a
   * primary that is slow to accept, under load or across regions.
   */
  hostTimeoutMillis?: number;
  /**
   * Try the host that qualified last first, then the others in order. Default true: after a
   * failover, each new connection would otherwise first try the old primary, now a standby (one
   * refused connection each). False keeps the order given, for a preferred primary.
   */
  preferLastPrimary?: boolean;
  /**
   * Where each host refused during a connect is reported, with why: a `primary:refused` event
   * (`createEvents()`). Default: none.
   */
  events?: IdemEvents;
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /**
     * `primaryClient` refused a host while connecting, with why (`'in recovery (a standby)'`,
     * `'read-only (transaction_read_only = on)'`, or the connection error); it tries the next.
     */
    'primary:refused': { host: string; port: number; reason: string };
  }
}

/** A host `primaryClient` tried, and why it was refused. */
export interface RefusedHost {
  host: string;
  port: number;
  reason: string;
}

const noPrimaryBrand = Symbol.for('idem.noPrimary');

/**
 * True for a `NoPrimaryError`, from any copy of the package.
 *
 * @example
 * pool.on('error', (error) => isNoPrimary(error) && log.warn(error.refused));
 */
export function isNoPrimary(error: unknown): error is NoPrimaryError {
  return (
    typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[noPrimaryBrand] === true
  );
}

/**
 * No host is a writable primary (every one refused the connection, is a standby or is
 * read-only), or the pool's connect timeout ran out first. SQLSTATE `08001`
 * (sqlclient_unable_to_establish_sqlconnection), so it is transient to `isRetryable` and to idem:
 * a retry after the failover completes connects. `refused` lists each host and why; `cause` is the
 * last connection error, when there was one.
 */
export class NoPrimaryError extends Error {
  readonly [noPrimaryBrand] = true;
  /** SQLSTATE class 08: a connection exception. */
  readonly code = '08001';
  readonly refused: readonly RefusedHost[];

  constructor(refused: readonly RefusedHost[], detail?: string, options: { cause?: unknown } = {}) {
    const list = refused.map((r) => `${r.host}:${r.port} (${r.reason})`).join(', ');
    super(`no writable primary${detail ? ` ${detail}` : ''}${list ? `: ${list}` : ''}`, options);
    this.name = 'NoPrimaryError';
    this.refused = refused;
  }
}

/**
 * What `primaryClient` needs of node-postgres's `Client` class: a constructor that takes the
 * pool's configuration, and `connect`, `query`, `end`, `on` on its instances.
 */
export type PgClientClass = abstract new (config?: never) => object;

/** The parts of a node-postgres client this module uses (pg's own fields, checked at runtime). */
interface ClientInternals {
  host: string;
  port: number;
  connectionParameters?: { host?: string; port?: number };
  connection?: { stream?: { destroyed?: boolean; destroy?(): void; once?(e: 'close', l: () => void): void } };
  connect(callback?: (error?: Error) => void): Promise<unknown> | void;
  query(config: { text: string; query_timeout?: number }): Promise<{ rows: unknown[] }>;
  end(): Promise<void>;
  on(event: 'error', listener: (error: Error) => void): unknown;
}

type ClientConfig = Record<string, unknown>;
type InternalClass = new (config?: ClientConfig) => ClientInternals;

const check = `SELECT pg_catalog.pg_is_in_recovery() AS in_recovery,
  pg_catalog.current_setting('transaction_read_only') AS read_only`;

/**
 * A node-postgres `Client` class whose connections land on the primary only. Pass it as the
 * pool's `Client`; everything else (`user`, `database`, `password`, `ssl`, `keepAlive`, …) is
 * configured on the pool as usual, and applies to every host.
 *
 * How one connect goes: each host, in order (the last primary first, see `preferLastPrimary`), is
 * tried with a short-lived check connection bounded by `hostTimeoutMillis`; the pooled connection
 * is then opened to the first host that is out of recovery and not read-only, and checked again
 * on that session (a failover between the two is refused, not kept). One extra connection and
 * round trip per pooled connection: pooled connections live long, so that is paid rarely.
 *
 * A connection already open stays where it is: after a failover, the old primary's connections
 * are closed by its shutdown (`57P01`, or the reset), and the pool opens new ones here. Set the
 * pool's `maxLifetimeSeconds` so that a connection that outlives a change of role without being
 * closed (a node kept up read-only) is replaced in bounded time; every statement it runs meanwhile
 * fails with `25006`, which is transient.
 *
 * @example
 * import pg from 'pg';
 * import { primaryClient } from 'idem/pg';
 *
 * const pool = new pg.Pool({
 *   user: 'app',
 *   database: 'app',
 *   Client: primaryClient(pg.Client, { hosts: ['db1:5432', 'db2:5432'] }),
 *   connectionTimeoutMillis: 5_000,
 * });
 */
export function primaryClient<C extends PgClientClass>(Client: C, options: PrimaryClientOptions = {}): C {
  const Base = Client as unknown as InternalClass;
  if (typeof Base !== 'function') throw new TypeError('primaryClient: pass the pg.Client class');
  if (options.hostTimeoutMillis !== undefined && !(options.hostTimeoutMillis > 0)) {
    throw new RangeError(
      `primaryClient: hostTimeoutMillis must be positive, not ${options.hostTimeoutMillis}`,
    );
  }
  const preferLast = options.preferLastPrimary ?? true;
  // Shared by every connection of every pool built on this class.
  const memory: { last?: string } = {};

  class PrimaryClient extends Base {
    readonly #hosts: Required<PrimaryHost>[];
    readonly #config: ClientConfig;
    readonly #urlFor: ((host: Required<PrimaryHost>) => string) | undefined;
    readonly #hostTimeoutMillis: number;

    constructor(config?: ClientConfig | string) {
      const resolved = resolveConfig(config, options);
      super(resolved.config);
      this.#hosts = resolved.hosts;
      this.#config = resolved.config;
      this.#urlFor = resolved.urlFor;
      this.#hostTimeoutMillis = resolved.hostTimeoutMillis;
    }

    override connect(callback?: (error?: Error) => void): Promise<unknown> | void {
      const connected = this.#connectToPrimary();
      if (callback) {
        connected.then(
          () => callback(),
          (error: Error) => callback(error),
        );
        return;
      }
      return connected.then(() => this);
    }

    async #connectToPrimary(): Promise<void> {
      const refused: RefusedHost[] = [];
      let lastError: unknown;
      // pg-pool's connect timeout destroys this client's (not yet used) socket: stop trying then.
      let gaveUp = false;
      let abortProbe: (() => void) | undefined;
      this.connection?.stream?.once?.('close', () => {
        gaveUp = true;
        abortProbe?.();
      });
      const refuse = (host: Required<PrimaryHost>, reason: string) => {
        refused.push({ host: host.host, port: host.port, reason });
        options.events?.emit('primary:refused', { host: host.host, port: host.port, reason });
      };
      for (const host of this.#order()) {
        if (gaveUp) break;
        const verdict = await this.#probe(host, (abort) => (abortProbe = abort));
        abortProbe = undefined;
        if (verdict.error !== undefined) lastError = verdict.error;
        if (verdict.refusal !== undefined) {
          refuse(host, verdict.refusal);
          continue;
        }
        if (gaveUp || this.connection?.stream?.destroyed) break;
        // The pooled connection, to the host that qualified; checked again on its own session.
        this.host = host.host;
        this.port = host.port;
        if (this.connectionParameters) {
          this.connectionParameters.host = host.host;
          this.connectionParameters.port = host.port;
        }
        try {
          await new Promise<void>((resolve, reject) => {
            void super.connect((error) => (error ? reject(error) : resolve()));
          });
        } catch (error) {
          refuse(host, describe(error));
          throw new NoPrimaryError(refused, 'after a host qualified', { cause: error });
        }
        const refusal = refusalOf(
          await this.query({ text: check, query_timeout: this.#hostTimeoutMillis }).catch((e: unknown) => e),
        );
        if (refusal === undefined) {
          memory.last = keyOf(host);
          return;
        }
        refuse(host, refusal);
        await this.end().catch(() => undefined);
        throw new NoPrimaryError(refused, 'after a host qualified');
      }
      throw new NoPrimaryError(refused, gaveUp ? 'within the connect timeout' : undefined, {
        cause: lastError,
      });
    }

    /** The hosts in the order to try: the last primary first, unless `preferLastPrimary` is off. */
    #order(): Required<PrimaryHost>[] {
      if (!preferLast || memory.last === undefined) return this.#hosts;
      const index = this.#hosts.findIndex((h) => keyOf(h) === memory.last);
      return index <= 0 ? this.#hosts : [this.#hosts[index]!, ...this.#hosts.filter((_, i) => i !== index)];
    }

    /** One check connection to `host`: a refusal reason, or none when it is a writable primary. */
    async #probe(
      host: Required<PrimaryHost>,
      onAbort: (abort: () => void) => void,
    ): Promise<{ refusal?: string; error?: unknown }> {
      const started = Date.now();
      const config: ClientConfig = {
        ...this.#config,
        host: host.host,
        port: host.port,
        connectionTimeoutMillis: this.#hostTimeoutMillis,
        keepAlive: false,
      };
      if (this.#urlFor) config.connectionString = this.#urlFor(host);
      const probe = new Base(config);
      // A check connection that the server ends (a shutdown, a failover) must not be an
      // unhandled 'error' event.
      probe.on('error', () => undefined);
      onAbort(() => {
        const stream = probe.connection?.stream;
        if (stream?.destroy) stream.destroy();
        else void probe.end().catch(() => undefined);
      });
      try {
        await new Promise<void>((resolve, reject) => {
          const done = probe.connect((error) => (error ? reject(error) : resolve()));
          if (done) done.then(() => resolve(), reject);
        });
        const remaining = Math.max(1, this.#hostTimeoutMillis - (Date.now() - started));
        const result = await probe.query({ text: check, query_timeout: remaining });
        return { refusal: refusalOf(result) };
      } catch (error) {
        return { refusal: describe(error), error };
      } finally {
        await probe.end().catch(() => undefined);
      }
    }
  }
  return PrimaryClient as unknown as C;
}

/** Why the check's answer refuses the host, or undefined when it is a writable primary. */
function refusalOf(result: unknown): string | undefined {
  if (result instanceof Error) return describe(result);
  const row = (result as { rows?: { in_recovery?: unknown; read_only?: unknown }[] }).rows?.[0];
  if (!row) return 'no answer to the check';
  if (row.in_recovery !== false) return 'in recovery (a standby)';
  if (row.read_only !== 'off') return 'read-only (transaction_read_only = on)';
  return undefined;
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' ? `${code}: ${error.message}` : error.message;
}

const keyOf = (h: Required<PrimaryHost>) => `${h.host}:${h.port}`;

interface ResolvedConfig {
  config: ClientConfig;
  hosts: Required<PrimaryHost>[];
  /** The pool's URL with one host in it, when the pool was configured by URL. */
  urlFor?: (host: Required<PrimaryHost>) => string;
  hostTimeoutMillis: number;
}

function resolveConfig(
  input: ClientConfig | string | undefined,
  options: PrimaryClientOptions,
): ResolvedConfig {
  const config: ClientConfig = typeof input === 'string' ? { connectionString: input } : { ...(input ?? {}) };
  const basePort = toPort(config.port) ?? toPort(process.env.PGPORT) ?? 5432;
  let hosts: Required<PrimaryHost>[] | undefined = options.hosts?.map((h) => parseHost(h, basePort));
  let urlFor: ResolvedConfig['urlFor'];
  if (typeof config.connectionString === 'string') {
    const url = splitMultiHostUrl(config.connectionString, basePort);
    hosts ??= url.hosts;
    urlFor = url.urlFor;
    config.connectionString = url.urlFor(hosts[0] ?? url.hosts[0]!);
  } else {
    const host = typeof config.host === 'string' ? config.host : (process.env.PGHOST ?? 'localhost');
    hosts ??= host.split(',').map((h) => parseHost(h.trim(), basePort));
  }
  if (hosts.length === 0) throw new RangeError('primaryClient: no host to try');
  config.host = hosts[0]!.host;
  config.port = hosts[0]!.port;
  const poolTimeout = Number(config.connectionTimeoutMillis) || 0;
  const hostTimeoutMillis =
    options.hostTimeoutMillis ??
    (poolTimeout > 0 ? Math.max(250, Math.floor(poolTimeout / hosts.length)) : 5000);
  return { config, hosts, urlFor, hostTimeoutMillis };
}

function toPort(value: unknown): number | undefined {
  const port =
    typeof value === 'number' ? value : typeof value === 'string' && value !== '' ? Number(value) : NaN;
  return Number.isInteger(port) && port > 0 && port < 65536 ? port : undefined;
}

/** `'db1'`, `'db1:5433'`, `'[::1]:5432'`, or `{ host, port }`. */
function parseHost(value: string | PrimaryHost, defaultPort: number): Required<PrimaryHost> {
  if (typeof value !== 'string') {
    if (!value.host) throw new RangeError('primaryClient: a host without a name');
    return { host: value.host, port: value.port ?? defaultPort };
  }
  const match = /^(?:\[([^\]]+)\]|([^:]*))(?::(\d+))?$/.exec(value);
  const name = match?.[1] ?? match?.[2];
  if (!match || !name) throw new RangeError(`primaryClient: cannot read the host "${value}"`);
  const port = match[3] === undefined ? defaultPort : toPort(match[3]);
  if (port === undefined) throw new RangeError(`primaryClient: bad port in "${value}"`);
  return { host: decodeURIComponent(name), port };
}

/**
 * Reads libpq's multi-host URL (`postgres://user:pw@h1:5432,h2:5433/db?sslmode=require`) into its
 * hosts, and a function that writes the same URL with one of them, which node-postgres accepts.
 * `target_session_attrs` is dropped (node-postgres ignores it; `primaryClient` always asks for a
 * writable primary); any value other than `read-write` or `primary` is refused, since it asks for
 * something else.
 *
 * @example
 * const { hosts } = splitMultiHostUrl('postgres://app@db1:5432,db2:5432/app');
 * // [{ host: 'db1', port: 5432 }, { host: 'db2', port: 5432 }]
 */
export function splitMultiHostUrl(
  url: string,
  defaultPort = 5432,
): { hosts: Required<PrimaryHost>[]; urlFor: (host: Required<PrimaryHost>) => string } {
  const match = /^(postgres(?:ql)?:\/\/)([^@/?#]*@)?([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/.exec(url);
  if (!match) throw new RangeError('primaryClient: the connection string is not a postgres:// URL');
  const [, scheme, userinfo = '', hostList = '', path = '', query = '', fragment = ''] = match;
  const hosts = hostList === '' ? [] : hostList.split(',').map((h) => parseHost(h, defaultPort));
  const params = new URLSearchParams(query.slice(1));
  const attrs = params.get('target_session_attrs');
  if (attrs !== null && attrs !== 'read-write' && attrs !== 'primary') {
    throw new RangeError(
      `primaryClient connects to a writable primary only; target_session_attrs=${attrs} asks for something else`,
    );
  }
  params.delete('target_session_attrs');
  const rest = params.toString();
  const urlFor = (host: Required<PrimaryHost>) => {
    const name = host.host.includes(':') ? `[${host.host}]` : encodeURIComponent(host.host);
    return `${scheme}${userinfo}${name}:${host.port}${path}${rest ? `?${rest}` : ''}${fragment}`;
  };
  return { hosts, urlFor };
}
