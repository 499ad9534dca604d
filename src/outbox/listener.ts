/**
 * LISTEN needs a connection of its own that stays open: the `Sql` interface has no LISTEN, and a
 * pooled connection cannot hold one. The dispatcher takes a connection string (it then loads `pg`
 * itself) or a factory for any client with `pg.Client`'s shape.
 *
 * That connection must reach PostgreSQL directly. Through a transaction-mode pooler (PgBouncer)
 * LISTEN succeeds but the session it ran in goes back to the pool, and notifications are dropped
 * ("got packet 'A' from server when not linked"): the listener would believe it is connected and
 * hear nothing. So the listener tests itself: at every (re)connection and then periodically it
 * sends a notification on its channel the way producers do (through the application's own
 * connections, `sendSelfTest`) and reports when it does not arrive in time.
 */
import { randomUUID } from 'node:crypto';
import { pgConnectionDefaults } from '../core/connection-defaults.js';
import type { IdemEvents } from '../core/event-channel.js';
import { IdemError, isIdemError } from '../core/errors.js';

/** The subset of `pg.Client` a listener uses. */
export interface ListenClient {
  connect(): Promise<unknown>;
  query(text: string): Promise<unknown>;
  on(event: 'notification', listener: (message: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  end(): Promise<void>;
}

/**
 * node-postgres `Client` options for the LISTEN connection (`connectionString`, `host`, `ssl`,
 * `connectionTimeoutMillis`, `keepAlive`, …), over idem's defaults (`pgConnectionDefaults`:
 * a 5 s connect timeout, TCP keepalive, a query read timeout).
 */
export interface ListenConnectionConfig {
  connectionString?: string;
  [option: string]: unknown;
}

/**
 * Where the LISTEN connection goes: a PostgreSQL connection string, node-postgres `Client`
 * options, or a factory returning a new, not yet connected client (any driver with `pg.Client`'s
 * shape). idem loads `pg` itself for the first two, with `pgConnectionDefaults` under your options.
 */
export type ListenSource = string | ListenConnectionConfig | (() => ListenClient | Promise<ListenClient>);

export interface NotificationListenerOptions {
  source: ListenSource;
  channel: string;
  /** Called for every notification on the channel, with its payload. */
  onNotification(payload: string): void;
  /** Called after every (re)connection: notifications may have been missed while down. */
  onConnected(): void;
  /**
   * Where the listener reports what it survives (a lost or refused connection, a failed self-test
   * send, a deaf connection): `error` events with source `errorSource`, where `listen`.
   */
  events: IdemEvents;
  /** The `source` of those `error` events: the module that owns the listener (`dispatcher`). */
  errorSource: string;
  /** Delay before reconnecting after a lost connection. */
  reconnectDelayMs(failures: number): number;
  /**
   * The self-test: sends `payload` on the channel the way producers notify (through the
   * application's connections, e.g. `SELECT pg_notify(channel, payload)` on its `Sql`). Unset: no
   * self-test.
   */
  sendSelfTest?(payload: string): Promise<unknown>;
  /** How often the self-test runs after the one at each connection. Default 30000 ms. */
  selfTestIntervalMs?: number;
  /** How long a self-test notification may take before the listener counts as deaf. Default 5000 ms. */
  selfTestTimeoutMs?: number;
  /**
   * A self-test notification did not arrive: `deaf` is now true, and the `ListenerDeafError` was
   * reported as an `error` event. Called at every failed self-test.
   */
  onDeaf?(error: ListenerDeafError): void;
  /** A self-test notification arrived after the listener had been deaf. */
  onHearing?(): void;
}

/** Prefix of self-test payloads; never a topic name, which the payloads of producers are. */
export const selfTestPrefix = 'idem:listen-self-test:';

/**
 * The LISTEN connection did not receive its own self-test notification in time: it is most likely
 * connected through a transaction-mode pooler (which drops notifications), or its connection is
 * silently broken. Events are still delivered, by polling.
 */
export class ListenerDeafError extends IdemError {
  constructor(message: string) {
    super('IDEM_LISTEN_DEAF', message, { retryable: true });
  }
}

/**
 * True for a `ListenerDeafError`, from any copy of the package.
 *
 * @example
 * events.on('error', ({ error }) => isListenerDeaf(error) && alert(error.message));
 * createOutboxDispatcher({ sql, publisher, listen, events });
 */
export const isListenerDeaf = (e: unknown): e is ListenerDeafError =>
  isIdemError(e) && e.code === 'IDEM_LISTEN_DEAF';

/** Holds one LISTEN connection and reconnects it with backoff while running. */
export class NotificationListener {
  private client: ListenClient | undefined;
  private stopped = false;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  private connecting: Promise<void> | undefined;
  private selfTestTimer: NodeJS.Timeout | undefined;
  /** The payload of the self-test in flight, and its deadline timer once the NOTIFY committed. */
  private pendingTest: { payload: string; timer?: NodeJS.Timeout } | undefined;
  private deafNow = false;
  /** Ends the current connection and schedules a reconnect, once. */
  private dropConnection: (() => void) | undefined;

  constructor(private readonly options: NotificationListenerOptions) {}

  /**
   * True after a self-test notification failed to arrive in time, until one arrives again. While
   * true, notifications cannot be relied on.
   */
  get deaf(): boolean {
    return this.deafNow;
  }

  /** Connects; resolves once listening, or after the first failure (a reconnect is then scheduled). */
  start(): Promise<void> {
    this.stopped = false;
    this.connecting = this.connect();
    return this.connecting;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.clearSelfTest();
    await this.connecting;
    const client = this.client;
    this.client = undefined;
    this.dropConnection = undefined;
    if (client) await client.end().catch(() => undefined);
  }

  get listening(): boolean {
    return this.client !== undefined;
  }

  private async connect(): Promise<void> {
    let client: ListenClient | undefined;
    try {
      client = await createResilientClient(this.options.source);
      let lost = false;
      const onLost = (error?: unknown) => {
        if (lost) return;
        lost = true;
        if (error !== undefined) this.reportError(error);
        if (this.client === client) {
          this.client = undefined;
          this.dropConnection = undefined;
          this.clearSelfTest(); // its answer can no longer arrive on this connection
        }
        void client?.end().catch(() => undefined);
        this.scheduleReconnect();
      };
      client.on('error', (error) => onLost(error));
      client.on('end', () => onLost());
      client.on('notification', (message) => {
        if (message.channel !== this.options.channel) return;
        const payload = message.payload ?? '';
        if (payload.startsWith(selfTestPrefix)) this.selfTestArrived(payload);
        else this.options.onNotification(payload);
      });
      await client.connect();
      // The channel name is generated (letters, digits, underscores), so quoting is enough.
      await client.query(`LISTEN "${this.options.channel}"`);
      if (this.stopped) {
        await client.end().catch(() => undefined);
        return;
      }
      this.client = client;
      this.dropConnection = () => onLost();
      this.failures = 0;
      this.options.onConnected();
      // Test the new connection now, unless the last test already found the listener deaf: then
      // keep to the interval, so a listener behind a pooler does not reconnect in a tight loop.
      this.scheduleSelfTest(this.deafNow ? this.selfTestIntervalMs : 0);
    } catch (error) {
      this.reportError(error);
      await client?.end().catch(() => undefined);
      this.scheduleReconnect();
    }
  }

  private get selfTestIntervalMs(): number {
    return this.options.selfTestIntervalMs ?? 30_000;
  }

  private scheduleSelfTest(delayMs: number): void {
    if (!this.options.sendSelfTest || this.stopped) return;
    clearTimeout(this.selfTestTimer);
    this.selfTestTimer = setTimeout(() => void this.selfTest(), delayMs);
    this.selfTestTimer.unref();
  }

  private clearSelfTest(): void {
    clearTimeout(this.selfTestTimer);
    if (this.pendingTest) clearTimeout(this.pendingTest.timer);
    this.pendingTest = undefined;
  }

  /** Sends one self-test notification and waits for it, boundedly. */
  private async selfTest(): Promise<void> {
    if (this.stopped || !this.client || this.pendingTest) return;
    const payload = `${selfTestPrefix}${randomUUID()}`;
    const test: { payload: string; timer?: NodeJS.Timeout } = { payload };
    this.pendingTest = test;
    try {
      await this.options.sendSelfTest!(payload);
    } catch (error) {
      // The application's database is unreachable: nothing is learned about the listener.
      if (this.pendingTest === test) this.pendingTest = undefined;
      this.reportError(error);
      this.scheduleSelfTest(this.selfTestIntervalMs);
      return;
    }
    // The notification is delivered at the NOTIFY's commit, so the bound starts now: a slow
    // database delays the send, not the listener's verdict. It may already have arrived.
    if (this.pendingTest !== test) return;
    const timeoutMs = this.options.selfTestTimeoutMs ?? 5000;
    test.timer = setTimeout(() => this.selfTestTimedOut(payload, timeoutMs), timeoutMs);
    test.timer.unref();
  }

  private selfTestArrived(payload: string): void {
    if (this.pendingTest?.payload !== payload) return; // another dispatcher's test, or a late one
    clearTimeout(this.pendingTest.timer);
    this.pendingTest = undefined;
    if (this.deafNow) {
      this.deafNow = false;
      this.options.onHearing?.();
    }
    this.scheduleSelfTest(this.selfTestIntervalMs);
  }

  private selfTestTimedOut(payload: string, timeoutMs: number): void {
    if (this.pendingTest?.payload !== payload) return;
    this.pendingTest = undefined;
    this.deafNow = true;
    const deaf = new ListenerDeafError(
      `LISTEN on "${this.options.channel}" did not receive its self-test notification within ${timeoutMs} ms: ` +
        `the LISTEN connection probably goes through a transaction-mode pooler (PgBouncer), which drops ` +
        `notifications, or the connection is broken. Give the dispatcher a direct connection for LISTEN ` +
        `(its \`listen\` option; DATABASE_DIRECT_URL for the idem demo). Events are delivered by polling meanwhile.`,
    );
    this.reportError(deaf);
    this.options.onDeaf?.(deaf);
    // A silently broken connection is replaced; behind a pooler the new one is tested at the interval.
    if (this.dropConnection) this.dropConnection();
    else this.scheduleSelfTest(this.selfTestIntervalMs);
  }

  private reportError(error: unknown): void {
    this.options.events.emit('error', { source: this.options.errorSource, where: 'listen', error });
  }

  private scheduleReconnect(): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.failures++;
    this.timer = setTimeout(() => {
      this.connecting = this.connect();
    }, this.options.reconnectDelayMs(this.failures));
    this.timer.unref();
  }
}

async function createResilientClient(source: ListenSource): Promise<ListenClient> {
  if (typeof source === 'function') return source();
  // Loaded only when a connection string or options are given, so the outbox depends on no driver.
  const { default: pg } = await import('pg');
  const config = typeof source === 'string' ? { connectionString: source } : source;
  return new pg.Client({ ...pgConnectionDefaults, ...config });
}
