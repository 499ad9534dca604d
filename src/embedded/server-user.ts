/**
 * Who runs the embedded server. PostgreSQL refuses to run as root, so a root process runs it as
 * the `postgres` user (or `nobody` where there is none, as in a bare Node container image); that
 * user must be able to reach the binaries and the data folder, which a private directory such as
 * `/root/app` (mode 0700) does not allow, so such paths are probed as that user first.
 */
import { execFileSync, spawnSync } from 'node:child_process';

export interface ServerUser {
  name: string;
  uid: number;
  gid: number;
}

/** The user to run the server as: undefined when this process is not root (it runs as itself). */
export function serverUser(): ServerUser | undefined {
  if (process.getuid?.() !== 0) return undefined;
  for (const name of ['postgres', 'nobody']) {
    const user = lookupUser(name);
    if (user) return user;
  }
  throw new Error(
    "PostgreSQL does not run as root and this machine has no 'postgres' user: create one (useradd --system postgres), run as a normal user, or set DATABASE_URL",
  );
}

function lookupUser(name: string): ServerUser | undefined {
  try {
    const id = (flag: string) =>
      Number(
        execFileSync('id', [flag, name], { stdio: ['ignore', 'pipe', 'ignore'] })
          .toString()
          .trim(),
      );
    return { name, uid: id('-u'), gid: id('-g') };
  } catch {
    return undefined;
  }
}

/**
 * Whether `user` passes `test` on every path (`-x` on a folder: it can be entered; on a file: run).
 * Asked by running `test` as that user, so every folder on the way is taken into account.
 */
export function userCan(user: ServerUser, checks: [flag: '-x' | '-r' | '-w', path: string][]): boolean {
  const script = checks.map((_, i) => `test ${checks[i]![0]} "$${i + 1}"`).join(' && ');
  const result = spawnSync('/bin/sh', ['-c', script, 'sh', ...checks.map(([, path]) => path)], {
    uid: user.uid,
    gid: user.gid,
    stdio: 'ignore',
  });
  return result.status === 0;
}
