/**
 * Where pg_auto_failover is: `pg_autoctl` (Debian's `pg-auto-failover-cli`) and a PostgreSQL whose
 * extension directory holds `pgautofailover` (`postgresql-15-auto-failover`). Nothing system-wide
 * is used beyond the binaries: the formation lives in a temporary directory (formation.ts).
 */
import { existsSync, readdirSync } from 'node:fs';
import { executable, findExecutable } from '../executables.js';
import { notInstalled } from '../services.js';

export interface PgAutoFailoverTools {
  /** The `pg_autoctl` binary. */
  pgAutoctl: string;
  /** `pg_ctl` of a PostgreSQL that has the `pgautofailover` extension installed. */
  pgCtl: string;
  /** That PostgreSQL's major version. */
  major: number;
}

/**
 * The tools, or undefined. `PG_AUTOCTL` names the binary (and only it is tried), otherwise PATH and
 * /usr/bin. `PG_AUTOCTL_PG_CTL` names pg_ctl; otherwise the newest /usr/lib/postgresql/<major>
 * whose share directory has the extension (Debian's layout).
 */
export function findPgAutoFailover(): PgAutoFailoverTools | undefined {
  const pgAutoctl = findExecutable('pg_autoctl', process.env.PG_AUTOCTL, [
    '/usr/bin/pg_autoctl',
    '/usr/local/bin/pg_autoctl',
  ]);
  if (!pgAutoctl) return undefined;
  if (process.env.PG_AUTOCTL_PG_CTL) {
    const pgCtl = process.env.PG_AUTOCTL_PG_CTL;
    if (!executable(pgCtl)) return undefined;
    const major = Number(/postgresql\/(\d+)\//.exec(pgCtl)?.[1] ?? 0);
    return { pgAutoctl, pgCtl, major };
  }
  let majors: number[];
  try {
    majors = readdirSync('/usr/lib/postgresql')
      .map(Number)
      .filter((n) => Number.isInteger(n) && n > 0)
      .sort((a, b) => b - a);
  } catch {
    return undefined;
  }
  for (const major of majors) {
    const pgCtl = `/usr/lib/postgresql/${major}/bin/pg_ctl`;
    const extension = `/usr/share/postgresql/${major}/extension/pgautofailover.control`;
    if (executable(pgCtl) && existsSync(extension)) return { pgAutoctl, pgCtl, major };
  }
  return undefined;
}

/**
 * The tools, or undefined with a loud line. Under CI=true their absence is an error: the high
 * availability suite may not pass by skipping.
 */
export function requirePgAutoFailover(): PgAutoFailoverTools | undefined {
  return (
    findPgAutoFailover() ??
    notInstalled(
      'pg_auto_failover',
      'the high-availability tests on a real formation',
      'install them (apt-get install postgresql-15-auto-failover pg-auto-failover-cli) or set PG_AUTOCTL and PG_AUTOCTL_PG_CTL',
    )
  );
}
