/**
 * A TCP proxy between a PostgreSQL client (node-postgres, postgres.js) and PostgreSQL that
 * understands just enough of the wire protocol to misbehave the way networks and managed
 * PostgreSQL do. Every fault is switched at run time; `stats()` counts what the proxy did.
 *
 * What it reads: the client's startup packet (answering SSL/GSS encryption requests with `N`
 * itself, so the rest stays plain text), then every typed message in both directions, split on
 * message boundaries whatever the TCP chunking (a COMMIT that shares a chunk with the statement
 * before it, as node-postgres's pipeline mode writes them, is found inside the chunk). It counts
 * sync points — each simple query `Q`, each `Sync` and the startup packet is answered by exactly
 * one `ReadyForQuery` — so it knows which of the server's messages answer which client message,
 * and how many round trips a client made (`stats().roundTrips`).
 *
 * The faults:
 * - `cutNextCommit(mode)` (one COMMIT) and `loseCommitAcks(p)` (each COMMIT with probability p):
 *   `lose-answer` forwards COMMIT, lets PostgreSQL answer it (it committed; or rolled back when
 *   the transaction had already failed — counted apart), drops that answer and everything after
 *   it, and cuts the client's connection (FIN, or RST with `reset`); the server side is ended.
 *   `drop-commit` never forwards COMMIT and closes both sides: PostgreSQL rolls back. A COMMIT is
 *   a simple query (`Q`, node-postgres, in pipeline mode too) or a Parse (`P`, postgres.js, which
 *   sends `commit` with the extended protocol); for a Parse the answer is the one of the next Sync.
 * - `randomResets(perSecond)`: a Poisson process that resets (RST both ways) one live connection
 *   at a time, at that mean rate over all connections.
 * - `latency({ minMs, maxMs })`: every chunk, each way, is delivered after a uniform random delay
 *   in the range, never before a chunk sent earlier in the same direction (ordering is kept).
 * - `partition({ ms? })`: silent — no byte crosses either way, and no FIN or RST either: closes
 *   are held in order behind the data, new connections are accepted but not connected upstream.
 *   `heal()` (or `ms`) delivers everything held in order: data, then closes. Without `ms` it lasts
 *   until `heal()` or `close()` (a partition that does not heal). TCP keepalive cannot see it:
 *   both kernels talk to the proxy, which acknowledges probes; only timers in the client
 *   (connect/query timeouts) and in the server (statement/idle timeouts, whose answers are held
 *   too) can end a session stuck behind it.
 * - `failover({ unansweredMs })`: resets every live connection, then for `unansweredMs` new
 *   connections are accepted and never answered (bytes read and discarded, no upstream): what a
 *   promotion with a DNS/VIP move looks like. They stay silent after the window too, until the
 *   client closes them. Connections opened after the window are normal.
 * - `refuse(on | { count })`: new connections get PostgreSQL's own refusal right after their
 *   startup packet — ErrorResponse severity FATAL, SQLSTATE 53300, "sorry, too many clients
 *   already" — and are closed (FIN). Never connected upstream. `count` refuses that many, then stops.
 * - `readOnly(on | { count })` and `readOnlyWindow({ ms })`: new connections are made read-only by
 *   adding `-c default_transaction_read_only=on` to the startup packet's `options`, as if they had
 *   landed on a standby or a demoted primary: every write fails with 25006 while reads work. The
 *   window resets every live connection first, and at its end resets the read-only ones (as the
 *   demoted node does when it restarts as a standby) unless `resetAtEnd: false`.
 * - `onStatement(pattern, action)`: when a client message (`Q` or `Parse`) whose SQL matches
 *   `pattern` is about to be forwarded: `reset` resets its connection instead (the statement never
 *   reaches PostgreSQL); `read-only` first sends, on that connection, `SET
 *   default_transaction_read_only = on; SET transaction_read_only = on` (making the current
 *   transaction, or the statement's own implicit one, read-only) and after the statement's Sync
 *   `SET default_transaction_read_only = off`, both answers swallowed: PostgreSQL itself fails the
 *   statement with 25006, and the connection stays usable and writable afterwards. A function
 *   runs first (it may switch other faults on, e.g. `refuse`, `resetAll`) and returns the action.
 *   Resolves when it fired, `times` times (default once).
 * - `clearFaults()` turns everything off; `backendPorts()` names the proxy's sessions in
 *   `pg_stat_activity.client_port` (to terminate them, or watch them from a direct connection).
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export type CutMode = 'lose-answer' | 'drop-commit';

/** What the proxy did, since it started (or since `resetStats`). */
export interface ProxyStats {
  /** Client connections accepted. */
  connections: number;
  /** Connections open now (both sides, or waiting upstream). */
  live: number;
  /** COMMITs seen: as a simple query, as a Parse (extended protocol). */
  commits: number;
  commitsSimple: number;
  commitsExtended: number;
  /** COMMITs that arrived in a TCP chunk together with other messages. */
  commitsInSharedChunk: number;
  /** COMMITs forwarded whose answer was dropped and whose client was cut: PostgreSQL answered COMMIT. */
  commitsLost: number;
  /** Of the same kind, but PostgreSQL answered ROLLBACK (the transaction had failed before). */
  commitsLostRolledBack: number;
  /** COMMITs never forwarded (`drop-commit`). */
  commitsDropped: number;
  /** Connections reset by `randomResets`. */
  resets: number;
  /** Connections reset by `failover`, `resetAll` and the read-only window. */
  forcedResets: number;
  /** Connections accepted during a failover window and never answered. */
  unanswered: number;
  /** Connections refused with 53300. */
  refusals: number;
  /** Connections made read-only. */
  readOnlyConnections: number;
  /** Statements that met an `onStatement` action. */
  statementFaults: number;
  /** Partitions started. */
  partitions: number;
  /** Chunks and closes held by partitions (delivered at heal, or dropped at close). */
  heldItems: number;
  /**
   * Round trips: client messages that start a batch (the first since a sync point) while every
   * earlier sync point of their connection is answered, i.e. the times a client waited for the
   * server before sending more. Statements pipelined behind unanswered ones do not count, however
   * TCP chunks them; the connection's startup and its Terminate do not either.
   */
  roundTrips: number;
}

export interface Partition {
  /** Delivers everything held, in order. Idempotent. */
  heal(): void;
  /** Resolves once healed. */
  readonly healed: Promise<void>;
}

/**
 * What `onStatement` does to a matching statement: `reset` its connection instead of forwarding it,
 * make it fail with a real 25006 (`read-only`), or forward it (`pass`). A function runs first (it
 * may switch other faults on) and says which.
 */
export type StatementAction =
  'reset' | 'read-only' | 'pass' | ((sql: string) => 'reset' | 'read-only' | 'pass' | void);

export interface PgProxy {
  port: number;
  /** `connectionString` with the host and port replaced by the proxy's. */
  url(connectionString: string): string;
  /** Cuts the next COMMIT on any connection; resolves once the cut happened. */
  cutNextCommit(mode: CutMode, options?: { reset?: boolean }): Promise<void>;
  /** Loses each COMMIT's answer with `probability` (0 turns it off). */
  loseCommitAcks(probability: number, options?: { reset?: boolean }): void;
  /** Resets live connections at random, `perSecond` on average over all of them (0 turns it off). */
  randomResets(perSecond: number): void;
  /** Delays every chunk each way by a uniform random time in the range; null turns it off. */
  latency(range: { minMs: number; maxMs: number } | null): void;
  /** A silent partition, until `heal()` (or for `ms`). */
  partition(options?: { ms?: number }): Partition;
  /** Resets every live connection, then leaves new connections unanswered for `unansweredMs`. */
  failover(options: { unansweredMs: number }): Promise<void>;
  /** 53300 for new connections while on, or for the next `count`. */
  refuse(mode: boolean | { count: number; sqlState?: string; message?: string }): void;
  /** New connections read-only while on, or the next `count`. */
  readOnly(mode: boolean | { count: number }): void;
  /** Resets every live connection, makes new ones read-only for `ms`, then (by default) resets those. */
  readOnlyWindow(options: { ms: number; resetAtEnd?: boolean }): Promise<void>;
  /** Resets every live connection that `which` selects (default: all); returns how many. */
  resetAll(which?: 'all' | 'read-only'): number;
  /** An action on the next statement(s) matching `pattern`; resolves once it fired `times` times. */
  onStatement(pattern: RegExp, action: StatementAction, options?: { times?: number }): Promise<void>;
  /** Turns every fault off (heals a partition, drops pending `onStatement` actions). */
  clearFaults(): void;
  /** Local ports of the proxy's live connections to PostgreSQL (`pg_stat_activity.client_port`). */
  backendPorts(): number[];
  stats(): ProxyStats;
  resetStats(): void;
  /** Closes everything, held connections included (the end of a partition that does not heal). */
  close(): Promise<void>;
}

const sslRequest = 80877103;
const gssRequest = 80877104;
const cancelRequest = 80877102;
const Z = 0x5a; // ReadyForQuery
const C = 0x43; // CommandComplete

type Item = { kind: 'data'; data: Buffer; due: number } | { kind: 'end' | 'reset'; due: number };

interface StatementHook {
  pattern: RegExp;
  action: StatementAction;
  left: number;
  done: () => void;
}

interface Settings {
  latency: { minMs: number; maxMs: number } | null;
  partition: { healed: boolean } | null;
  loseProbability: number;
  loseReset: boolean;
  armed: { mode: CutMode; reset: boolean; done: () => void } | undefined;
  unansweredUntil: number;
  refuse: { left: number; sqlState: string; message: string } | null;
  readOnly: { left: number } | null;
  hooks: StatementHook[];
}

const newStats = (): ProxyStats => ({
  connections: 0,
  live: 0,
  commits: 0,
  commitsSimple: 0,
  commitsExtended: 0,
  commitsInSharedChunk: 0,
  commitsLost: 0,
  commitsLostRolledBack: 0,
  commitsDropped: 0,
  resets: 0,
  forcedResets: 0,
  unanswered: 0,
  refusals: 0,
  readOnlyConnections: 0,
  statementFaults: 0,
  partitions: 0,
  heldItems: 0,
  roundTrips: 0,
});

/**
 * One direction of one connection: items (data chunks, a FIN, an RST) delivered in order, each
 * no earlier than its due time, none while a partition holds the link.
 */
class Lane {
  private items: Item[] = [];
  private timer: NodeJS.Timeout | undefined;
  private lastDue = 0;
  constructor(
    private readonly settings: Settings,
    private readonly stats: () => ProxyStats,
    private readonly deliver: (item: Item) => void,
  ) {}

  push(item: { kind: 'data'; data: Buffer } | { kind: 'end' | 'reset' }) {
    const range = this.settings.latency;
    const delay = range ? range.minMs + Math.random() * (range.maxMs - range.minMs) : 0;
    const due = Math.max(Date.now() + delay, this.lastDue);
    this.lastDue = due;
    if (this.settings.partition) this.stats().heldItems++;
    this.items.push({ ...item, due });
    this.pump();
  }

  get pendingClose(): boolean {
    return this.items.some((i) => i.kind !== 'data');
  }

  pump() {
    if (this.timer) return;
    while (this.items.length > 0) {
      if (this.settings.partition) return; // heal() pumps again
      const next = this.items[0]!;
      const wait = next.due - Date.now();
      if (wait > 0) {
        this.timer = setTimeout(() => {
          this.timer = undefined;
          this.pump();
        }, wait);
        return;
      }
      this.items.shift();
      this.deliver(next);
    }
  }

  clear() {
    this.items = [];
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

const isRealSocket = (s: Socket | undefined): s is Socket => s !== undefined && !s.destroyed;

function shut(socket: Socket | undefined, reset: boolean) {
  if (!isRealSocket(socket)) return;
  if (reset) socket.resetAndDestroy();
  else socket.end();
}

function errorResponse(fields: Record<string, string>): Buffer {
  const body = Buffer.concat([
    ...Object.entries(fields).map(([code, value]) => Buffer.from(`${code}${value}\0`, 'utf8')),
    Buffer.from([0]),
  ]);
  const head = Buffer.alloc(5);
  head[0] = 0x45; // E
  head.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([head, body]);
}

function simpleQuery(text: string): Buffer {
  const body = Buffer.from(`${text}\0`, 'utf8');
  const head = Buffer.alloc(5);
  head[0] = 0x51; // Q
  head.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([head, body]);
}

/** The startup packet with `-c default_transaction_read_only=on` added to its `options`. */
function readOnlyStartup(packet: Buffer): Buffer {
  const fields: [string, string][] = [];
  let at = 8;
  for (;;) {
    const end = packet.indexOf(0, at);
    if (end < 0 || end === at) break;
    const name = packet.subarray(at, end).toString('utf8');
    const valueEnd = packet.indexOf(0, end + 1);
    fields.push([name, packet.subarray(end + 1, valueEnd).toString('utf8')]);
    at = valueEnd + 1;
  }
  const flag = '-c default_transaction_read_only=on';
  const options = fields.find(([name]) => name === 'options');
  if (options) options[1] = `${options[1]} ${flag}`.trim();
  else fields.push(['options', flag]);
  const body = Buffer.concat([
    ...fields.map(([n, v]) => Buffer.from(`${n}\0${v}\0`, 'utf8')),
    Buffer.from([0]),
  ]);
  const head = Buffer.alloc(8);
  head.writeInt32BE(8 + body.length, 0);
  packet.copy(head, 4, 4, 8); // the protocol version
  return Buffer.concat([head, body]);
}

/** The SQL of a `Q` message. */
const queryText = (message: Buffer) => message.subarray(5, message.length - 1).toString('utf8');

/** A Parse message's statement name and SQL. */
function parseMessage(message: Buffer): { name: string; text: string } {
  const nameEnd = message.indexOf(0, 5);
  const queryEnd = message.indexOf(0, nameEnd + 1);
  return {
    name: message.subarray(5, nameEnd).toString('utf8'),
    text: message.subarray(nameEnd + 1, queryEnd).toString('utf8'),
  };
}

/** The statement a Bind message binds (after the portal's name). */
function bindStatement(message: Buffer): string {
  const portalEnd = message.indexOf(0, 5);
  const statementEnd = message.indexOf(0, portalEnd + 1);
  return message.subarray(portalEnd + 1, statementEnd).toString('utf8');
}

/** The tag of a CommandComplete message (`COMMIT`, `ROLLBACK`, `INSERT 0 1`, …). */
const commandTag = (message: Buffer) => message.subarray(5, message.length - 1).toString('utf8');

const isCommitText = (text: string) => /^\s*(COMMIT|END)\s*;?\s*$/i.test(text);

/** A proxy in front of the PostgreSQL that `url` names (its host, and its port or 5432). */
export function startPgProxyTo(url: string): Promise<PgProxy> {
  const target = new URL(url);
  return startPgProxy({ host: target.hostname, port: Number(target.port || 5432) });
}

export async function startPgProxy(target: { host: string; port: number }): Promise<PgProxy> {
  const settings: Settings = {
    latency: null,
    partition: null,
    loseProbability: 0,
    loseReset: false,
    armed: undefined,
    unansweredUntil: 0,
    refuse: null,
    readOnly: null,
    hooks: [],
  };
  let stats = newStats();
  const links = new Set<Link>();
  let closing = false;

  class Link {
    upstream: Socket | undefined;
    readonly toServer: Lane;
    readonly toClient: Lane;
    /** Cut (by a fault or a close): further input from either side is dropped. */
    cut = false;
    readonly readOnly: boolean;
    // client → server parsing
    private fromClient: Buffer = Buffer.alloc(0);
    private untyped = true;
    private syncsSent = 0;
    /** A message came since the last sync point: the next one belongs to the same batch. */
    private batchOpen = false;
    private commitAtNextSync: { lose: boolean; reset: boolean; armed?: Settings['armed'] } | undefined;
    /** Named prepared statements' SQL, and the statements parsed since the last Sync. */
    private readonly prepared = new Map<string, string>();
    private readonly parsedInBatch = new Set<string>();
    /** A statement of the proxy's own to send after the next sync point (its answer swallowed). */
    private afterSync: Buffer | undefined;
    // server → client parsing
    private fromServer: Buffer = Buffer.alloc(0);
    private readiesSeen = 0;
    /** The sync point whose answer is COMMIT's, to be dropped (then the link cut). */
    private loseAt: { index: number; reset: boolean; armed?: Settings['armed']; tag?: string } | undefined;
    /** Sync points whose answers the proxy swallows (its own injected statements). */
    private readonly swallow = new Set<number>();

    constructor(readonly client: Socket) {
      this.readOnly = takeOne('readOnly');
      if (this.readOnly) stats.readOnlyConnections++;
      this.toServer = new Lane(
        settings,
        () => stats,
        (item) => this.deliverToServer(item),
      );
      this.toClient = new Lane(
        settings,
        () => stats,
        (item) => {
          if (item.kind === 'data') {
            if (isRealSocket(this.client)) this.client.write(item.data);
          } else {
            shut(this.client, item.kind === 'reset');
            this.finish();
          }
        },
      );
      this.relay(
        client,
        (chunk) => this.onClientData(chunk),
        () => this.toServer,
      );
      // Not held by a partition: connect now, as a client's connect would reach the server.
      if (!settings.partition) this.ensureUpstream();
    }

    get established() {
      return isRealSocket(this.upstream) && !this.cut;
    }

    private ensureUpstream() {
      if (this.upstream || closing) return;
      const upstream = connect(target.port, target.host);
      this.upstream = upstream;
      this.relay(
        upstream,
        (chunk) => this.onServerData(chunk),
        () => this.toClient,
      );
    }

    /**
     * Hands what `socket` sends to `onData`, and its end or reset to the lane towards the other
     * side, while the link is not cut; its close finishes the link.
     */
    private relay(socket: Socket, onData: (chunk: Buffer) => void, lane: () => Lane) {
      socket.on('data', (chunk: Buffer) => {
        if (!this.cut) onData(chunk);
      });
      let ended = false;
      socket.on('end', () => {
        ended = true;
        if (!this.cut) lane().push({ kind: 'end' });
      });
      socket.on('error', () => undefined);
      socket.on('close', (hadError) => {
        if (!this.cut && !ended) lane().push({ kind: hadError ? 'reset' : 'end' });
        this.finish();
      });
    }

    private deliverToServer(item: Item) {
      if (!this.upstream) {
        // Held since before it connected; the client gave up meanwhile: never connect.
        if (this.client.destroyed && this.toServer.pendingClose) {
          this.toServer.clear();
          this.finish();
          return;
        }
        this.ensureUpstream();
      }
      if (item.kind === 'data') {
        if (isRealSocket(this.upstream)) this.upstream.write(item.data);
      } else {
        shut(this.upstream, item.kind === 'reset');
      }
    }

    /** Resets both sides now, dropping whatever is queued either way. */
    reset() {
      if (this.cut) return;
      this.cut = true;
      this.toServer.clear();
      this.toClient.clear();
      shut(this.client, true);
      shut(this.upstream, true);
      this.finish();
    }

    finish() {
      if (this.client.destroyed && (!this.upstream || this.upstream.destroyed)) {
        if (links.delete(this)) stats.live = links.size;
      }
    }

    private onClientData(chunk: Buffer) {
      this.fromClient = this.fromClient.length ? Buffer.concat([this.fromClient, chunk]) : chunk;
      const out: Buffer[] = [];
      let messages = 0;
      const flush = () => {
        if (out.length) this.toServer.push({ kind: 'data', data: Buffer.concat(out.splice(0)) });
      };
      const shared = () => messages > 1 || this.fromClient.length > 0;
      for (;;) {
        if (this.cut) return;
        if (this.untyped) {
          if (this.fromClient.length < 8) break;
          const length = this.fromClient.readInt32BE(0);
          if (this.fromClient.length < length) break;
          const code = this.fromClient.readInt32BE(4);
          let packet = this.fromClient.subarray(0, length);
          this.fromClient = this.fromClient.subarray(length);
          if (code === sslRequest || code === gssRequest) {
            // Refused here: the rest of the conversation stays readable.
            this.toClient.push({ kind: 'data', data: Buffer.from('N') });
            continue;
          }
          this.untyped = false;
          if (code === cancelRequest) {
            out.push(packet);
            this.syncsSent = Number.NaN; // no conversation follows
            continue;
          }
          if (this.readOnly) packet = readOnlyStartup(packet);
          out.push(packet);
          this.syncsSent++; // the startup is answered by one ReadyForQuery
          continue;
        }
        if (this.fromClient.length < 5) break;
        const total = 1 + this.fromClient.readInt32BE(1);
        if (this.fromClient.length < total) break;
        const message = this.fromClient.subarray(0, total);
        this.fromClient = this.fromClient.subarray(total);
        messages++;
        const type = message[0];
        if (!this.batchOpen && type !== 0x58 /* Terminate */ && this.syncsSent === this.readiesSeen) {
          stats.roundTrips++;
        }
        this.batchOpen = true;
        // The SQL this message starts to run: a simple query; a Parse; or the Bind of a named
        // statement parsed in an earlier batch (a prepared statement's text crosses the wire once
        // per connection, so its later executions are known by name).
        let text: string | undefined;
        if (type === 0x51 /* Q */) text = queryText(message);
        else if (type === 0x50 /* P */) {
          const parsed = parseMessage(message);
          if (parsed.name) this.prepared.set(parsed.name, parsed.text);
          this.parsedInBatch.add(parsed.name);
          text = parsed.text;
        } else if (type === 0x42 /* B */) {
          const name = bindStatement(message);
          if (name && !this.parsedInBatch.has(name)) text = this.prepared.get(name);
        }
        if (text !== undefined) {
          const hook = settings.hooks.find((h) => h.pattern.test(text));
          if (hook) {
            stats.statementFaults++;
            if (--hook.left <= 0) settings.hooks.splice(settings.hooks.indexOf(hook), 1);
            const action = typeof hook.action === 'function' ? (hook.action(text) ?? 'pass') : hook.action;
            if (this.cut) {
              hook.done(); // the hook reset this link (resetAll)
              return;
            }
            if (action === 'reset') {
              flush();
              hook.done();
              this.reset();
              return;
            }
            if (action === 'read-only') {
              // Inside a transaction block the second SET makes this transaction read-only (the
              // first is rolled back with it); outside one the first makes the statement's own
              // implicit transaction read-only, and is undone right after the statement's Sync.
              out.push(simpleQuery('SET default_transaction_read_only = on; SET transaction_read_only = on'));
              this.swallow.add(this.syncsSent++);
              this.afterSync = simpleQuery('SET default_transaction_read_only = off');
            }
            hook.done();
          }
          if (isCommitText(text)) {
            stats.commits++;
            if (type === 0x51) stats.commitsSimple++;
            else stats.commitsExtended++;
            if (shared()) stats.commitsInSharedChunk++;
            const armed = settings.armed;
            if (armed) settings.armed = undefined;
            if (armed?.mode === 'drop-commit') {
              stats.commitsDropped++;
              flush();
              this.cut = true;
              this.toServer.clear();
              this.toClient.clear();
              shut(this.client, armed.reset);
              this.upstream?.destroy();
              this.finish();
              armed.done();
              return;
            }
            const lose = armed !== undefined || Math.random() < settings.loseProbability;
            const reset = armed ? armed.reset : settings.loseReset;
            if (lose) {
              if (type === 0x51) this.loseAt = { index: this.syncsSent, reset, armed };
              else this.commitAtNextSync = { lose, reset, armed };
            }
          }
        }
        out.push(message);
        if (type === 0x51 /* Q */ || type === 0x46 /* F */) this.syncsSent++;
        else if (type === 0x53 /* Sync */) {
          this.parsedInBatch.clear();
          const commit = this.commitAtNextSync;
          if (commit) {
            this.commitAtNextSync = undefined;
            this.loseAt = { index: this.syncsSent, reset: commit.reset, armed: commit.armed };
          }
          this.syncsSent++;
        } else continue;
        this.batchOpen = false; // a sync point ends the batch
        if (this.afterSync) {
          out.push(this.afterSync);
          this.afterSync = undefined;
          this.swallow.add(this.syncsSent++);
        }
      }
      flush();
    }

    private onServerData(chunk: Buffer) {
      this.fromServer = this.fromServer.length ? Buffer.concat([this.fromServer, chunk]) : chunk;
      const out: Buffer[] = [];
      for (;;) {
        if (this.fromServer.length < 5) break;
        const total = 1 + this.fromServer.readInt32BE(1);
        if (this.fromServer.length < total) break;
        const message = this.fromServer.subarray(0, total);
        this.fromServer = this.fromServer.subarray(total);
        const index = this.readiesSeen;
        if (message[0] === Z) this.readiesSeen++;
        if (this.swallow.has(index)) {
          if (message[0] === Z) this.swallow.delete(index);
          continue;
        }
        const lose = this.loseAt;
        if (lose && index >= lose.index) {
          if (index === lose.index && message[0] === C) lose.tag = commandTag(message);
          if (message[0] === Z && index === lose.index) {
            // PostgreSQL answered COMMIT: drop the answer and hang up on the client.
            this.loseAt = undefined;
            if (/^ROLLBACK/i.test(lose.tag ?? '')) stats.commitsLostRolledBack++;
            else stats.commitsLost++;
            if (out.length) this.toClient.push({ kind: 'data', data: Buffer.concat(out.splice(0)) });
            this.toClient.push({ kind: lose.reset ? 'reset' : 'end' });
            this.toServer.push({ kind: 'end' });
            this.cut = true;
            lose.armed?.done();
            return;
          }
          continue;
        }
        out.push(message);
      }
      if (out.length) this.toClient.push({ kind: 'data', data: Buffer.concat(out) });
    }
  }

  /** Takes one from a counted mode (`refuse`, `readOnly`), turning it off when used up. */
  function takeOne(mode: 'readOnly'): boolean {
    const m = settings[mode];
    if (!m) return false;
    if (--m.left <= 0) settings[mode] = null;
    return true;
  }

  /** A connection refused as PostgreSQL refuses one over `max_connections`. */
  function refuseConnection(client: Socket, how: NonNullable<Settings['refuse']>) {
    stats.refusals++;
    let pending: Buffer = Buffer.alloc(0);
    client.on('error', () => undefined);
    client.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 8 && pending.length >= pending.readInt32BE(0)) {
        const length = pending.readInt32BE(0);
        const code = pending.readInt32BE(4);
        pending = pending.subarray(length);
        if (code === sslRequest || code === gssRequest) {
          client.write('N');
          continue;
        }
        client.end(
          errorResponse({
            S: 'FATAL',
            V: 'FATAL',
            C: how.sqlState,
            M: how.message,
            F: 'proc.c',
            R: 'InitProcess',
          }),
        );
        return;
      }
    });
  }

  const server: Server = createServer((client) => {
    stats.connections++;
    if (closing) {
      client.destroy();
      return;
    }
    if (Date.now() < settings.unansweredUntil) {
      // A black hole: the address answers the handshake, nothing behind it ever speaks.
      stats.unanswered++;
      client.on('error', () => undefined);
      client.on('data', () => undefined);
      client.on('end', () => client.destroy());
      blackHoles.add(client);
      client.on('close', () => blackHoles.delete(client));
      return;
    }
    const refusal = settings.refuse;
    if (refusal) {
      if (--refusal.left <= 0) settings.refuse = null;
      refuseConnection(client, refusal);
      return;
    }
    links.add(new Link(client));
    stats.live = links.size;
  });
  const blackHoles = new Set<Socket>();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  let resetTimer: NodeJS.Timeout | undefined;
  let currentPartition: Partition | undefined;
  const resetAll = (which: 'all' | 'read-only' = 'all') => {
    let n = 0;
    for (const link of [...links]) {
      if (which === 'read-only' && !link.readOnly) continue;
      if (link.cut && link.client.destroyed) continue;
      link.reset();
      n++;
    }
    stats.forcedResets += n;
    return n;
  };

  const proxy: PgProxy = {
    port,
    url(connectionString) {
      const url = new URL(connectionString);
      url.hostname = '127.0.0.1';
      url.port = String(port);
      return url.toString();
    },
    cutNextCommit(mode, options = {}) {
      return new Promise((resolve) => {
        settings.armed = { mode, reset: options.reset ?? false, done: resolve };
      });
    },
    loseCommitAcks(probability, options = {}) {
      settings.loseProbability = probability;
      settings.loseReset = options.reset ?? false;
    },
    randomResets(perSecond) {
      if (resetTimer) clearInterval(resetTimer);
      resetTimer = undefined;
      if (perSecond <= 0) return;
      const tickMs = 50;
      resetTimer = setInterval(() => {
        // Poisson: the number of resets in this tick.
        let budget = perSecond * (tickMs / 1000);
        while (budget > 0 && Math.random() < budget) {
          budget -= 1;
          const candidates = [...links].filter((l) => l.established);
          const victim = candidates[Math.floor(Math.random() * candidates.length)];
          if (!victim) return;
          victim.reset();
          stats.resets++;
        }
      }, tickMs);
      resetTimer.unref();
    },
    latency(range) {
      settings.latency = range;
    },
    partition(options = {}) {
      stats.partitions++;
      const state = { healed: false };
      settings.partition = state;
      let resolve!: () => void;
      const healed = new Promise<void>((r) => (resolve = r));
      let timer: NodeJS.Timeout | undefined;
      const heal = () => {
        if (currentPartition === handle) currentPartition = undefined;
        if (state.healed) return;
        state.healed = true;
        if (timer) clearTimeout(timer);
        if (settings.partition === state) settings.partition = null;
        for (const link of [...links]) {
          link.toServer.pump();
          link.toClient.pump();
        }
        resolve();
      };
      if (options.ms !== undefined) timer = setTimeout(heal, options.ms);
      const handle: Partition = { heal, healed };
      currentPartition = handle;
      return handle;
    },
    async failover({ unansweredMs }) {
      settings.unansweredUntil = Date.now() + unansweredMs;
      resetAll();
      await new Promise((r) => setTimeout(r, unansweredMs));
    },
    refuse(mode) {
      if (mode === false) settings.refuse = null;
      else if (mode === true)
        settings.refuse = {
          left: Number.POSITIVE_INFINITY,
          sqlState: '53300',
          message: 'sorry, too many clients already',
        };
      else
        settings.refuse = {
          left: mode.count,
          sqlState: mode.sqlState ?? '53300',
          message: mode.message ?? 'sorry, too many clients already',
        };
    },
    readOnly(mode) {
      if (mode === false) settings.readOnly = null;
      else settings.readOnly = { left: mode === true ? Number.POSITIVE_INFINITY : mode.count };
    },
    async readOnlyWindow({ ms, resetAtEnd = true }) {
      resetAll();
      proxy.readOnly(true);
      await new Promise((r) => setTimeout(r, ms));
      proxy.readOnly(false);
      if (resetAtEnd) resetAll('read-only');
    },
    resetAll,
    onStatement(pattern, action, options = {}) {
      return new Promise((done) => {
        settings.hooks.push({ pattern, action, left: options.times ?? 1, done });
      });
    },
    clearFaults() {
      proxy.loseCommitAcks(0);
      proxy.randomResets(0);
      proxy.latency(null);
      settings.armed = undefined;
      settings.unansweredUntil = 0;
      settings.refuse = null;
      settings.readOnly = null;
      settings.hooks = [];
      currentPartition?.heal();
    },
    backendPorts() {
      return [...links]
        .filter((l) => l.established && l.upstream!.localPort !== undefined)
        .map((l) => l.upstream!.localPort!);
    },
    stats: () => ({ ...stats, live: links.size }),
    resetStats() {
      stats = newStats();
    },
    async close() {
      closing = true;
      proxy.randomResets(0);
      if (settings.partition) settings.partition.healed = true;
      settings.partition = null;
      for (const link of links) {
        link.cut = true;
        link.toServer.clear();
        link.toClient.clear();
        link.client.destroy();
        link.upstream?.destroy();
      }
      links.clear();
      for (const socket of blackHoles) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}
