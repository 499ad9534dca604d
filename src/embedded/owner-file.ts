/**
 * One process at a time owns an embedded server's folder. The owner writes `owner.json` there,
 * created exclusively, with its pid and start time, and adds the server's pid and port once it
 * runs. A second start finds a live owner and is refused with what it runs; a file whose owner is
 * gone (killed with SIGKILL, say) is stale and is taken over, after the caller has dealt with a
 * server the dead owner may have left running.
 */
import { readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isAlive, startTime } from './process-info.js';

export interface Owner {
  /** The process that started the server. */
  pid: number;
  /** Its start time, so a reused pid is not taken for it (see process-info.ts). */
  startTime?: string | undefined;
  /** The data folder (inside this folder, or elsewhere for a root process). */
  dataDir?: string | undefined;
  /** The server, once it runs. */
  serverPid?: number | undefined;
  port?: number | undefined;
}

/** The data folder is in use by a running server: the message names it. */
export class EmbeddedInUseError extends Error {
  readonly code = 'IDEM_EMBEDDED_IN_USE';
  constructor(
    readonly dir: string,
    readonly owner: Owner,
  ) {
    const server =
      owner.serverPid && owner.port
        ? `a running server (postgres pid ${owner.serverPid}, port ${owner.port}, started by pid ${owner.pid})`
        : `a server being started by pid ${owner.pid}`;
    super(
      `the embedded PostgreSQL data folder ${dir} is in use by ${server}: stop that process (Ctrl-C where it runs, or kill ${owner.pid}), or set DATABASE_URL`,
    );
    this.name = 'EmbeddedInUseError';
  }
}

export interface OwnerFile {
  /** The owner that was there before, dead, if this one took over a stale file. */
  previous: Owner | undefined;
  /** Records more about the server (its pid and port). */
  update(fields: Partial<Owner>): void;
  /** Removes the file, if it is still this process's. */
  release(): void;
}

/** Takes ownership of `dir`, or throws `EmbeddedInUseError` naming the live owner. */
export function takeOwnership(dir: string): OwnerFile {
  const path = join(dir, 'owner.json');
  const me: Owner = { pid: process.pid, startTime: startTime(process.pid) };
  let previous: Owner | undefined;
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(path, JSON.stringify(me), { flag: 'wx' });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 5) throw error;
    }
    // An empty file is one another process has just created and not yet written: read it again.
    const current = readOwner(path) ?? (pause(200), readOwner(path));
    if (current && isOwnerAlive(current)) throw new EmbeddedInUseError(dir, current);
    previous = current ?? previous;
    // Stale: moved aside under a name of our own, so that of two processes taking over at once
    // only one removes it; the other finds the winner's file on its next attempt.
    const aside = `${path}.${process.pid}.stale`;
    try {
      renameSync(path, aside);
      unlinkSync(aside);
    } catch {
      // The other process won the rename: try again.
    }
  }
  let record = me;
  return {
    previous,
    update(fields) {
      record = { ...record, ...fields };
      writeFileSync(path, JSON.stringify(record));
    },
    release() {
      const current = readOwner(path);
      if (current?.pid === me.pid && current.startTime === me.startTime) {
        try {
          unlinkSync(path);
        } catch {
          // Already gone.
        }
      }
    },
  };
}

function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function readOwner(path: string): Owner | undefined {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Owner;
  } catch {
    return undefined; // missing, or cut short by a crash mid-write: nobody owns it
  }
}

function isOwnerAlive(owner: Owner): boolean {
  if (!isAlive(owner.pid)) return false;
  const now = startTime(owner.pid);
  return owner.startTime === undefined || now === undefined || now === owner.startTime;
}
