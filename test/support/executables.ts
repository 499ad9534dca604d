/** Where the external programs some suites drive (PgBouncer, pg_auto_failover) are installed. */
import { accessSync, constants } from 'node:fs';
import path from 'node:path';

/** Whether `file` exists and may be executed. */
export function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The program `name`: the path `override` gives when set (and only it is tried), otherwise the first
 * executable `name` on PATH, then in `fallbacks`; undefined when none is.
 */
export function findExecutable(
  name: string,
  override: string | undefined,
  fallbacks: string[],
): string | undefined {
  const candidates =
    override !== undefined
      ? [override]
      : [
          ...(process.env.PATH ?? '').split(path.delimiter).map((dir) => dir && path.join(dir, name)),
          ...fallbacks,
        ];
  return candidates.find((c) => c && executable(c));
}
