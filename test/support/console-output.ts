import { vi } from 'vitest';

/** What a CLI command printed: stdout and stderr apart, and both in the order printed. */
export interface Printed {
  code: number;
  out: string;
  err: string;
  all: string;
}

/**
 * Runs a CLI command's `run` in this process with `console.log` and `console.error` captured (the
 * commands print through them), and restores them afterwards.
 */
export async function printedBy(command: () => Promise<number>): Promise<Printed> {
  const out: string[] = [];
  const err: string[] = [];
  const all: string[] = [];
  const collect =
    (into: string[]) =>
    (...args: unknown[]) => {
      const line = args.join(' ');
      into.push(line);
      all.push(line);
    };
  const log = vi.spyOn(console, 'log').mockImplementation(collect(out));
  const error = vi.spyOn(console, 'error').mockImplementation(collect(err));
  try {
    const code = await command();
    return { code, out: out.join('\n'), err: err.join('\n'), all: all.join('\n') };
  } finally {
    log.mockRestore();
    error.mockRestore();
  }
}
