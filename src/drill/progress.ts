/** Progress while drills run, on stderr so stdout keeps only the report. */
import type { Drill, DrillResult } from './drill.js';

export interface DrillProgress {
  start(index: number, total: number, drill: Drill): void;
  step(message: string): void;
  finish(result: DrillResult): void;
}

export const silentProgress: DrillProgress = { start() {}, step() {}, finish() {} };

interface ProgressStream {
  write(text: string): unknown;
  isTTY?: boolean;
}

/**
 * Writes `[2/6] concurrent: 20 identical requests in flight` as each step starts and
 * `[2/6] concurrent: passed in 312 ms` at the end. On a terminal the steps of a drill overwrite one
 * line; elsewhere (CI logs) every step is a line of its own.
 */
export function streamProgress(stream: ProgressStream): DrillProgress {
  const tty = stream.isTTY === true;
  let prefix = '';
  const line = (text: string, final: boolean) => {
    if (tty) {
      stream.write(`\r\x1b[2K${text}${final ? '\n' : ''}`);
    } else {
      stream.write(`${text}\n`);
    }
  };
  return {
    start(index, total, drill) {
      prefix = `[${index + 1}/${total}] ${drill.name}`;
      line(`${prefix}: ${drill.title}`, false);
    },
    step(message) {
      line(`${prefix}: ${message}…`, false);
    },
    finish(result) {
      const what =
        result.status === 'skipped'
          ? `skipped: ${result.summary}`
          : `${result.status} in ${result.durationMs} ms`;
      line(`${prefix}: ${what}`, true);
    },
  };
}
