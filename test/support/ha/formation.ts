/**
 * A pg_auto_failover formation of the test's own: a monitor and two PostgreSQL nodes on free
 * local ports, everything (data, pg_autoctl's configuration and state, sockets, logs) under one
 * temporary directory, removed by `stop` (or when this process exits). Nothing system-wide is
 * used or changed: the machine's own PostgreSQL is never touched.
 *
 * - PostgreSQL refuses to run as root: as root, every pg_autoctl and initdb runs as the `postgres`
 *   system user (uid/gid of `id postgres`), and the directory is given to it.
 * - Each `pg_autoctl run` is a process group of its own (the supervisor, its services and the
 *   postmaster); PostgreSQL's other processes each start a session of their own (setsid), so they
 *   are found by their working directory, their data directory. A node is killed at once, as a
 *   crashed host, and `stop` leaves nothing running, even a process that outlived its postmaster.
 * - The data directories are created by initdb first, so that settings the tests need are in
 *   place before pg_autoctl starts PostgreSQL: sockets in the temporary directory, small shared
 *   buffers (pg_auto_failover sizes them to a quarter of the machine's memory), and unthrottled
 *   checkpoints (pg_basebackup of the second node waits for one: 7 s throttled, under 1 s not).
 * - Replication is pg_auto_failover's default for two nodes: the standby has replication quorum,
 *   so the primary runs with `synchronous_standby_names = 'ANY 1 (pgautofailover_standby_N)'` and
 *   `synchronous_commit = on`; `start` checks both, and that the standby streams as a quorum one.
 * - Failure detection is shortened on the monitor by default (`detection: 'fast'`): with
 *   pg_auto_failover's defaults a crashed primary is replaced after ~52 s (20 s to consider it
 *   unhealthy, then 30 s of `primary_demote_timeout`, measured here), too long for a test.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import {
  appendFileSync,
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { PgAutoFailoverTools } from './tools.js';
import { freePort } from '../ports.js';

export { findPgAutoFailover, requirePgAutoFailover, type PgAutoFailoverTools } from './tools.js';

/** The monitor settings that make a crashed primary replaced within ~10 s instead of ~52 s. */
export const fastDetection: Readonly<Record<string, string>> = {
  // The monitor probes every node each second, gives up on one after one failed retry…
  'pgautofailover.health_check_period': '1000',
  'pgautofailover.health_check_timeout': '1000',
  'pgautofailover.health_check_max_retries': '1',
  'pgautofailover.health_check_retry_delay': '500',
  // …and fails over once the node has also not reported for 3 s (default 20 s)…
  'pgautofailover.node_considered_unhealthy_timeout': '3000',
  // …after waiting 5 s (default 30 s) for the old primary to demote itself, which a dead one
  // never does. During that wait the promoted node is read-only.
  'pgautofailover.primary_demote_timeout': '5000',
};

export interface FormationOptions {
  /** `'fast'` (default): `fastDetection` on the monitor. `'defaults'`: pg_auto_failover's own. */
  detection?: 'fast' | 'defaults';
  /** Progress lines (the formation's own steps, with timings). Default: none. */
  log?: (line: string) => void;
}

export interface FormationNode {
  readonly name: string;
  readonly host: string;
  readonly port: number;
  readonly pgdata: string;
}

export interface NodeState {
  name: string;
  port: number;
  reported: string;
  assigned: string;
}

/** What a fault took, measured by the formation itself (clients measure their own outage). */
export interface FaultReport {
  /** The primary before the fault, and the one after it. */
  from: string;
  to: string;
  /** From the fault to a primary that accepts writes (not in recovery, not read-only). */
  writableAfterMs: number;
  /** From the fault to a healthy formation again: primary and a synchronous secondary. */
  healthyAfterMs: number;
}

export interface Formation {
  readonly nodes: readonly FormationNode[];
  readonly monitor: { host: string; port: number; url: string };
  /** How long `startFormation` took, in milliseconds. */
  readonly startedInMs: number;
  /** Every node as `{ host, port }`, in node order. */
  readonly hosts: readonly { host: string; port: number }[];
  /**
   * A libpq multi-host URL of the nodes (`postgres://postgres@h1:p1,h2:p2/postgres`), with
   * `params` as its query string (`{ target_session_attrs: 'primary' }`).
   */
  url(params?: Record<string, string>): string;
  /** A single-host URL of one node. */
  nodeUrl(node: FormationNode): string;
  /** The monitor's view of the nodes. */
  states(): Promise<NodeState[]>;
  /** The node the monitor has as primary, or undefined during a transition. */
  primary(): Promise<FormationNode | undefined>;
  /**
   * A planned failover (`pg_autoctl perform failover`): the primary is drained and demoted, the
   * secondary promoted; resolves once the new primary takes writes and the old one is its
   * synchronous secondary again.
   */
  failover(): Promise<FaultReport>;
  /**
   * kill -9 of the primary. `keeper: 'killed'` (default) kills the whole node at once, its
   * postmaster, backends and pg_autoctl (a crashed host): the monitor promotes the secondary;
   * then the node's pg_autoctl is started again, as its init system would, and the node rejoins
   * as a secondary. `keeper: 'alive'` kills only the postmaster: pg_autoctl restarts
   * PostgreSQL in place within ~2 s and there is no promotion (measured here), so `to` is `from`.
   * Resolves once the formation is healthy again.
   */
  killPrimary(options?: { keeper?: 'killed' | 'alive' }): Promise<FaultReport>;
  /** The tail of every log (pg_autoctl's and PostgreSQL's), for a failure message. */
  logs(maxPerFile?: number): string;
  /** Stops everything and removes the directory; no process or port is left. Idempotent. */
  stop(): Promise<void>;
}

interface RunningNode extends FormationNode {
  /** The current `pg_autoctl run` (the leader of its process group). */
  run?: ChildProcess;
  runs: number;
}

const host = '127.0.0.1';
const superuser = 'postgres';

export async function startFormation(
  tools: PgAutoFailoverTools,
  options: FormationOptions = {},
): Promise<Formation> {
  const began = Date.now();
  const say = (line: string) =>
    options.log?.(`[formation +${((Date.now() - began) / 1000).toFixed(1)}s] ${line}`);
  const owner = processOwner();
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-ha-'));
  const sockets = path.join(dir, 'sockets');
  const logsDir = path.join(dir, 'logs');
  for (const d of [
    sockets,
    logsDir,
    path.join(dir, 'xdg-config'),
    path.join(dir, 'xdg-data'),
    path.join(dir, 'xdg-run'),
  ]) {
    mkdirSync(d, { recursive: true, mode: 0o700 });
  }
  if (owner) chownTree(dir, owner);
  const env: NodeJS.ProcessEnv = {
    PATH: `${path.dirname(tools.pgCtl)}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    HOME: dir,
    LANG: 'C.UTF-8',
    // pg_autoctl keeps its configuration and state under the XDG directories: ours, not ~postgres's.
    XDG_CONFIG_HOME: path.join(dir, 'xdg-config'),
    XDG_DATA_HOME: path.join(dir, 'xdg-data'),
    XDG_RUNTIME_DIR: path.join(dir, 'xdg-run'),
    // Its local connections: our socket directory, as our superuser.
    PGHOST: sockets,
    PGUSER: superuser,
  };
  const children = new Set<ChildProcess>();
  const postmasters = new Set<string>(); // data directories whose postmaster may have crashed
  let stopped = false;
  let logCount = 0;

  const spawnAs = (args: string[], name: string, binary = tools.pgAutoctl): ChildProcess => {
    const file = path.join(logsDir, `${String(++logCount).padStart(2, '0')}-${name}.log`);
    const fd = openSync(file, 'a', 0o644);
    try {
      const child = spawn(binary, args, {
        env,
        cwd: dir,
        stdio: ['ignore', fd, fd],
        // A process group of its own: pg_autoctl's processes and the postmaster are killed at once.
        detached: true,
        ...(owner ?? {}),
      });
      children.add(child);
      child.once('exit', () => children.delete(child));
      child.once('error', () => children.delete(child));
      return child;
    } finally {
      closeSync(fd);
    }
  };
  const runToEnd = async (args: string[], name: string, timeoutMs: number, binary?: string) => {
    const child = spawnAs(args, name, binary);
    const code = await new Promise<number | string>((resolve) => {
      const timer = setTimeout(() => {
        killGroup(child);
        resolve(`timeout after ${timeoutMs} ms`);
      }, timeoutMs);
      child.once('error', (error) => {
        clearTimeout(timer);
        resolve(error.message);
      });
      child.once('exit', (exitCode, signal) => {
        clearTimeout(timer);
        resolve(exitCode ?? signal ?? 'unknown');
      });
    });
    if (code !== 0)
      throw new Error(
        `${path.basename(binary ?? tools.pgAutoctl)} ${args.join(' ')}: ${code}\n${logs(3000)}`,
      );
  };
  const logs = (maxPerFile = 4000): string => {
    const parts: string[] = [];
    const read = (file: string, label: string) => {
      try {
        const text = readFileSync(file, 'utf8');
        parts.push(`--- ${label}\n${text.slice(-maxPerFile)}`);
      } catch {
        // gone
      }
    };
    try {
      for (const f of readdirSync(logsDir).sort()) read(path.join(logsDir, f), f);
      for (const node of ['monitor', 'node1', 'node2']) {
        const logDir = path.join(dir, node, 'log');
        if (!existsSync(logDir)) continue;
        for (const f of readdirSync(logDir).sort().slice(-2)) read(path.join(logDir, f), `${node}/log/${f}`);
      }
    } catch {
      // the directory was removed
    }
    return parts.join('\n');
  };

  /** initdb, plus settings pg_autoctl must find in place when it first starts PostgreSQL. */
  const initdb = async (name: string, settings: Record<string, string>) => {
    const pgdata = path.join(dir, name);
    await runToEnd(
      ['-D', pgdata, '--auth=trust', '-U', superuser, '-E', 'UTF8', '--no-sync'],
      `${name}-initdb`,
      60_000,
      path.join(path.dirname(tools.pgCtl), 'initdb'),
    );
    const lines = Object.entries({
      unix_socket_directories: sockets,
      shared_buffers: '128MB',
      ...settings,
    }).map(([k, v]) => `${k} = '${v.replace(/'/g, "''")}'`);
    appendFileSync(path.join(pgdata, 'postgresql.auto.conf'), `${lines.join('\n')}\n`);
    postmasters.add(pgdata);
    return pgdata;
  };

  /** When this process exits without `stop` (a crash, a killed test): everything, at once. */
  const cleanupSync = () => {
    for (const child of children) killGroup(child);
    const deadline = Date.now() + 2000;
    while (killEverythingIn(dir).length > 0 && Date.now() < deadline) sleepSync(10);
    for (const pgdata of postmasters) removeOrphanSharedMemory(pgdata);
    rmSync(dir, { recursive: true, force: true });
  };
  const onExit = () => cleanupSync();
  process.once('exit', onExit);

  let monitorPool: pg.Pool | undefined;
  const nodes: RunningNode[] = [];
  const ports = await freePorts(3);
  const monitor = { host, port: ports[0]!, url: '' };
  monitor.url = `postgres://autoctl_node@${host}:${monitor.port}/pg_auto_failover?sslmode=disable`;

  const startRun = (node: { pgdata: string; name: string }) =>
    spawnAs(['run', '--pgdata', node.pgdata], `${node.name}-run`);

  try {
    // The monitor.
    const monitorData = await initdb('monitor', options.detection === 'defaults' ? {} : { ...fastDetection });
    await runToEnd(
      [
        'create',
        'monitor',
        '--pgdata',
        monitorData,
        '--pgport',
        String(monitor.port),
        '--hostname',
        host,
        '--auth',
        'trust',
        '--no-ssl',
        '--pgctl',
        tools.pgCtl,
      ],
      'monitor-create',
      60_000,
    );
    // `create monitor` has no --listen: PostgreSQL would listen on every interface.
    await runToEnd(
      ['config', 'set', '--pgdata', monitorData, 'postgresql.listen_addresses', host],
      'monitor-config',
      30_000,
    );
    const monitorRun = startRun({ pgdata: monitorData, name: 'monitor' });
    monitorPool = new pg.Pool({
      host,
      port: monitor.port,
      user: superuser,
      database: 'pg_auto_failover',
      max: 2,
      connectionTimeoutMillis: 2000,
      idleTimeoutMillis: 1000,
    });
    monitorPool.on('error', () => undefined);
    await waitFor('the monitor', 30_000, async () => {
      if (monitorRun.exitCode !== null) throw new Error(`the monitor's pg_autoctl exited:\n${logs()}`);
      return (await monitorPool!.query('SELECT 1 FROM pgautofailover.formation')).rowCount === 1;
    });
    say(`monitor up on ${monitor.port}`);

    const monitorUri = `postgres://autoctl_node@${host}:${monitor.port}/pg_auto_failover?sslmode=prefer`;
    const createNode = async (name: string, port: number) => {
      const pgdata = path.join(dir, name);
      const node: RunningNode = { name, host, port, pgdata, runs: 0 };
      await runToEnd(
        [
          'create',
          'postgres',
          '--pgdata',
          pgdata,
          '--pgport',
          String(port),
          '--hostname',
          host,
          '--listen',
          host,
          '--name',
          name,
          '--auth',
          'trust',
          '--no-ssl',
          '--pgctl',
          tools.pgCtl,
          '--monitor',
          monitorUri,
        ],
        `${name}-create`,
        90_000,
      );
      postmasters.add(pgdata);
      node.run = startRun(node);
      node.runs++;
      nodes.push(node);
      return node;
    };
    // The first node: initialised here, registered as the single node, then run.
    await initdb('node1', { checkpoint_completion_target: '0' });
    await createNode('node1', ports[1]!);
    await waitFor('node1 as the single primary', 30_000, async () => {
      const states = await stateOf(monitorPool!);
      return states.some((s) => s.name === 'node1' && s.reported === 'single' && s.assigned === 'single');
    });
    say(`node1 single on ${ports[1]}`);
    // The second: pg_basebackup of the first, then it follows it as a quorum (synchronous) standby.
    await createNode('node2', ports[2]!);
    say(`node2 created on ${ports[2]}`);
  } catch (error) {
    await monitorPool?.end().catch(() => undefined);
    await stopAll();
    throw error;
  }

  async function stopAll() {
    const running = [...children];
    // SIGQUIT: pg_autoctl stops its PostgreSQL and exits (~2 s); then anything left is killed.
    await Promise.all(running.map((child) => stopChild(child, 10_000)));
    // PostgreSQL's processes leave pg_autoctl's process group (each calls setsid): whatever is
    // still running in the directory (a bgworker that outlived its postmaster, say) is killed.
    await killEverythingInAndWait(dir, 10_000);
    for (const pgdata of postmasters) removeOrphanSharedMemory(pgdata);
    process.off('exit', onExit);
    rmSync(dir, { recursive: true, force: true });
  }

  const states = () => stateOf(monitorPool);
  const nodeUrl = (node: FormationNode) => `postgres://${superuser}@${node.host}:${node.port}/postgres`;
  const isWritable = (node: FormationNode) => writable(node.host, node.port);

  const primary = async (): Promise<FormationNode | undefined> => {
    const all = await states();
    const p = all.find(
      (s) => s.reported === s.assigned && ['primary', 'wait_primary', 'single'].includes(s.reported),
    );
    return p && nodes.find((n) => n.name === p.name);
  };

  const healthy = async (): Promise<FormationNode | undefined> => {
    const all = await states();
    const p = all.find((s) => s.reported === 'primary' && s.assigned === 'primary');
    const s = all.find((x) => x.reported === 'secondary' && x.assigned === 'secondary');
    if (!p || !s || all.length !== 2) return undefined;
    const node = nodes.find((n) => n.name === p.name)!;
    return (await synchronousOn(node)) ? node : undefined;
  };

  /** The primary requires a synchronous (quorum) standby, and it has one streaming. */
  const synchronousOn = async (node: FormationNode): Promise<boolean> => {
    const row = await askNode<{ names: string; commit: string; streaming: number }>(
      node.host,
      node.port,
      2000,
      `SELECT current_setting('synchronous_standby_names') AS names,
              current_setting('synchronous_commit') AS commit,
              (SELECT count(*)::int FROM pg_stat_replication
                WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')) AS streaming`,
    );
    return row !== undefined && row.names !== '' && row.commit === 'on' && row.streaming >= 1;
  };

  const waitHealthy = (what: string, timeoutMs: number) =>
    waitFor(
      what,
      timeoutMs,
      async () => (await healthy()) ?? false,
      () => logs(),
    );

  try {
    await waitHealthy('a primary and a synchronous secondary', 60_000);
  } catch (error) {
    await monitorPool.end().catch(() => undefined);
    await stopAll();
    throw error;
  }
  const startedInMs = Date.now() - began;
  say(`healthy in ${(startedInMs / 1000).toFixed(1)} s`);

  const waitWritable = (except: string | undefined, timeoutMs: number) =>
    waitFor(
      except ? `a primary other than ${except} that takes writes` : 'a primary that takes writes',
      timeoutMs,
      async () => {
        for (const node of nodes) {
          if (node.name !== except && (await isWritable(node))) return node;
        }
        return false;
      },
      () => logs(),
    );

  return {
    nodes,
    monitor,
    startedInMs,
    hosts: nodes.map((n) => ({ host: n.host, port: n.port })),
    url(params = {}) {
      const query = new URLSearchParams(params).toString();
      return `postgres://${superuser}@${nodes.map((n) => `${n.host}:${n.port}`).join(',')}/postgres${query ? `?${query}` : ''}`;
    },
    nodeUrl,
    states,
    primary,
    async failover() {
      const from =
        (await healthy()) ?? (await waitHealthy('a healthy formation before the failover', 60_000));
      const t0 = Date.now();
      say(`failover from ${from.name}`);
      // Writability is watched while pg_autoctl waits: it returns only once the old primary is a
      // secondary again, seconds after the new one took writes.
      const promoted = waitWritable(from.name, 90_000).then((node) => ({ node, at: Date.now() }));
      promoted.catch(() => undefined);
      await runToEnd(
        ['perform', 'failover', '--pgdata', path.join(dir, 'monitor'), '--wait', '60'],
        'failover',
        90_000,
      );
      const { node: to, at } = await promoted;
      const writableAfterMs = at - t0;
      await waitHealthy('the old primary back as a synchronous secondary', 60_000);
      const healthyAfterMs = Date.now() - t0;
      say(
        `failover ${from.name} -> ${to.name}: writable after ${writableAfterMs} ms, healthy after ${healthyAfterMs} ms`,
      );
      return { from: from.name, to: to.name, writableAfterMs, healthyAfterMs };
    },
    async killPrimary({ keeper = 'killed' } = {}) {
      const from = ((await healthy()) ??
        (await waitHealthy('a healthy formation before the kill', 60_000))) as RunningNode;
      const postmasterPid = Number(
        readFileSync(path.join(from.pgdata, 'postmaster.pid'), 'utf8').split('\n')[0],
      );
      const t0 = Date.now();
      say(
        `kill -9 of ${from.name} (${keeper === 'killed' ? 'the whole node' : `postmaster ${postmasterPid} only`})`,
      );
      let to: FormationNode;
      if (keeper === 'killed') {
        const run = from.run!;
        const gone = new Promise<void>((resolve) =>
          run.exitCode !== null || run.signalCode !== null ? resolve() : run.once('exit', () => resolve()),
        );
        // Everything of the node at once, as a crashed host: pg_autoctl's group, and PostgreSQL's
        // processes (the postmaster, backends, background workers: each has a session of its own).
        killGroup(run);
        killEverythingIn(from.pgdata);
        signal(postmasterPid, 'SIGKILL');
        await gone;
        await waitGroupGone(run.pid!, 10_000);
        await killEverythingInAndWait(from.pgdata, 10_000);
        to = await waitWritable(from.name, 90_000);
        say(`${to.name} promoted, writable after ${Date.now() - t0} ms`);
        // The node's init system starts pg_autoctl again: it rejoins as a secondary.
        from.run = startRun(from);
        from.runs++;
      } else {
        signal(postmasterPid, 'SIGKILL');
        to = await waitWritable(undefined, 90_000);
      }
      const writableAfterMs = Date.now() - t0;
      await waitHealthy(`${from.name} back as a synchronous secondary`, 90_000);
      const healthyAfterMs = Date.now() - t0;
      say(
        `kill ${from.name} -> ${to.name}: writable after ${writableAfterMs} ms, healthy after ${healthyAfterMs} ms`,
      );
      return { from: from.name, to: to.name, writableAfterMs, healthyAfterMs };
    },
    logs,
    async stop() {
      if (stopped) return;
      stopped = true;
      await monitorPool?.end().catch(() => undefined);
      await stopAll();
      say('stopped');
    },
  };
}

/** As root: the uid and gid of `postgres` (PostgreSQL refuses root). Otherwise nothing. */
function processOwner(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  try {
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    throw new Error('running as root, and there is no `postgres` user to run PostgreSQL as');
  }
}

function chownTree(dir: string, owner: { uid: number; gid: number }) {
  chownSync(dir, owner.uid, owner.gid);
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) chownTree(p, owner);
    else chownSync(p, owner.uid, owner.gid);
  }
}

function killGroup(child: ChildProcess) {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

function signal(pid: number, name: NodeJS.Signals) {
  try {
    process.kill(pid, name);
  } catch {
    // already gone
  }
}

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitGroupGone(pgid: number, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (groupAlive(pgid) && Date.now() < deadline) await sleep(20);
}

async function stopChild(child: ChildProcess, graceMs: number) {
  const pid = child.pid;
  if (pid === undefined) return;
  if (child.exitCode === null && child.signalCode === null) {
    try {
      process.kill(pid, 'SIGQUIT');
    } catch {
      // gone
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, graceMs);
      child.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
  // Whatever is left of its group (a postmaster that outlived it, backends): killed.
  if (groupAlive(pid)) {
    killGroup(child);
    await waitGroupGone(pid, 5000);
  }
}

/**
 * The processes whose working directory is `dir` or under it: pg_autoctl runs in the formation's
 * directory, and every PostgreSQL process in its data directory. That finds them all, whatever
 * process group or parent they have now.
 */
function processesIn(dir: string): number[] {
  const found: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return found; // no /proc: the process groups are all there is
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cwd = readlinkSync(`/proc/${entry}/cwd`);
      if (cwd === dir || cwd.startsWith(`${dir}/`)) found.push(Number(entry));
    } catch {
      // gone, a zombie, or not ours to read
    }
  }
  return found;
}

/** SIGKILL to every process in `dir`; returns the ones signalled. */
function killEverythingIn(dir: string): number[] {
  const pids = processesIn(dir);
  for (const pid of pids) signal(pid, 'SIGKILL');
  return pids;
}

async function killEverythingInAndWait(dir: string, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (killEverythingIn(dir).length > 0 && Date.now() < deadline) await sleep(20);
}

function sleepSync(ms: number) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * A postmaster killed with SIGKILL leaves its small System V segment behind (its data directory's
 * postmaster.pid names it, line 7, and the postmaster's pid, line 1). Removed only when it is still
 * the segment that postmaster created and nothing is attached to it.
 */
function removeOrphanSharedMemory(pgdata: string) {
  let lines: string[];
  try {
    lines = readFileSync(path.join(pgdata, 'postmaster.pid'), 'utf8').split('\n');
  } catch {
    return; // stopped cleanly: PostgreSQL removed both
  }
  const pid = Number(lines[0]);
  const shmid = Number(lines[6]?.trim().split(/\s+/)[1]);
  if (!Number.isInteger(shmid) || !Number.isInteger(pid)) return;
  try {
    const info = execFileSync('ipcs', ['-m', '-i', String(shmid)], { encoding: 'utf8', stdio: 'pipe' });
    const cpid = /\bcpid=(\d+)/.exec(info)?.[1];
    const nattch = /\bnattch=(\d+)/.exec(info)?.[1];
    if (cpid === String(pid) && nattch === '0')
      execFileSync('ipcrm', ['-m', String(shmid)], { stdio: 'pipe' });
  } catch {
    // no ipcs here, or already gone
  }
}

async function stateOf(monitor: pg.Pool): Promise<NodeState[]> {
  const { rows } = await monitor.query<{ name: string; port: number; reported: string; assigned: string }>(
    `SELECT nodename AS name, nodeport AS port, reportedstate::text AS reported, goalstate::text AS assigned
       FROM pgautofailover.node ORDER BY nodeid`,
  );
  return rows;
}

/** Whether a node takes writes: connected, not in recovery, not read-only. */
async function writable(h: string, port: number): Promise<boolean> {
  const row = await askNode<{ recovery: boolean; ro: string }>(
    h,
    port,
    1000,
    `SELECT pg_is_in_recovery() AS recovery, current_setting('transaction_read_only') AS ro`,
  );
  return row !== undefined && row.recovery === false && row.ro === 'off';
}

/** The first row `query` answers on node `h`:`port` as the superuser, or undefined if it could not be asked. */
async function askNode<Row>(
  h: string,
  port: number,
  timeoutMs: number,
  query: string,
): Promise<Row | undefined> {
  const client = new pg.Client({
    host: h,
    port,
    user: superuser,
    database: 'postgres',
    connectionTimeoutMillis: timeoutMs,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return (await client.query<Row & pg.QueryResultRow>(query)).rows[0];
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function waitFor<T>(
  what: string,
  timeoutMs: number,
  probe: () => Promise<T | false>,
  diagnostics?: () => string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== false) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `waited ${timeoutMs} ms for ${what}${last ? ` (last error: ${last instanceof Error ? last.message : JSON.stringify(last)})` : ''}${diagnostics ? `\n${diagnostics()}` : ''}`,
      );
    }
    await sleep(100);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function freePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freePort(host));
  return [...ports];
}
