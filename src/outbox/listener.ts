/**
 * LISTEN needs a connection of its own that stays open: the `Sql` interface has no LISTEN, and a
 * pooled connection cannot hold one. The dispatcher takes a connection string (it then loads `pg`
 * itself) or a factory for any client with `pg.Client`'s shape.
 */

/** The subset of `pg.Client` a listener uses. */
export interface ListenClient {
  connect(): Promise<unknown>;
  query(text: string): Promise<unknown>;
  on(event: 'notification', listener: (message: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  end(): Promise<void>;
}

/** A PostgreSQL connection string, or a factory returning a new, not yet connected client. */
export type ListenSource = string | (() => ListenClient | Promise<ListenClient>);

export interface NotificationListenerOptions {
  source: ListenSource;
  channel: string;
  /** Called for every notification on the channel, with its payload. */
  onNotification(payload: string): void;
  /** Called after every (re)connection: notifications may have been missed while down. */
  onConnected(): void;
  onError(error: unknown): void;
  /** Delay before reconnecting after a lost connection. */
  reconnectDelayMs(failures: number): number;
}

/** Holds one LISTEN connection and reconnects it with backoff while running. */
export class NotificationListener {
  private client: ListenClient | undefined;
  private stopped = false;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  private connecting: Promise<void> | undefined;

  constructor(private readonly options: NotificationListenerOptions) {}

  /** Connects; resolves once listening, or after the first failure (a reconnect is then scheduled). */
  start(): Promise<void> {
    this.stopped = false;
    this.connecting = this.connect();
    return this.connecting;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.connecting;
    const client = this.client;
    this.client = undefined;
    if (client) await client.end().catch(() => undefined);
  }

  get listening(): boolean {
    return this.client !== undefined;
  }

  private async connect(): Promise<void> {
    let client: ListenClient | undefined;
    try {
      client = await createClient(this.options.source);
      let lost = false;
      const onLost = (error?: unknown) => {
        if (lost) return;
        lost = true;
        if (error !== undefined) this.options.onError(error);
        if (this.client === client) this.client = undefined;
        void client?.end().catch(() => undefined);
        this.scheduleReconnect();
      };
      client.on('error', (error) => onLost(error));
      client.on('end', () => onLost());
      client.on('notification', (message) => {
        if (message.channel === this.options.channel) this.options.onNotification(message.payload ?? '');
      });
      await client.connect();
      // The channel name is generated (letters, digits, underscores), so quoting is enough.
      await client.query(`LISTEN "${this.options.channel}"`);
      if (this.stopped) {
        await client.end().catch(() => undefined);
        return;
      }
      this.client = client;
      this.failures = 0;
      this.options.onConnected();
    } catch (error) {
      this.options.onError(error);
      await client?.end().catch(() => undefined);
      this.scheduleReconnect();
    }
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

async function createClient(source: ListenSource): Promise<ListenClient> {
  if (typeof source === 'function') return source();
  // Loaded only when a connection string is given, so the outbox itself depends on no driver.
  const { default: pg } = await import('pg');
  return new pg.Client({ connectionString: source });
}
