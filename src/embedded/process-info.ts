/** What the embedded server's bookkeeping needs to know about another process, by its pid. */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/**
 * Whether `pid` names a live process. A zombie (exited, not yet reaped: what a server left behind
 * becomes when its parent is a container's PID 1 that reaps nothing) counts as gone.
 */
export function isAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (error) {
    // EPERM: it exists, under another user (a server run as `postgres` while we are not root).
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  return procStat(pid)?.state !== 'Z';
}

/**
 * When the process started, as an opaque token (Linux: clock ticks since boot), or undefined where
 * it cannot be read. A recorded pid is only the same process if its start time matches too: pids
 * are reused, after a reboot most of all.
 */
export function startTime(pid: number): string | undefined {
  return procStat(pid)?.startTime;
}

/** The process's command name (`postgres` for a PostgreSQL server), or undefined if unknown. */
export function commandName(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    // No /proc (macOS): ask ps.
    try {
      const out = execFileSync('ps', ['-o', 'comm=', '-p', String(pid)], {
        stdio: ['ignore', 'pipe', 'ignore'],
      });
      const name = out.toString().trim();
      return name ? name.split('/').pop() : undefined;
    } catch {
      return undefined;
    }
  }
}

function procStat(pid: number): { state: string; startTime: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces: split after its last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0]!, startTime: fields[19]! };
  } catch {
    return undefined;
  }
}
