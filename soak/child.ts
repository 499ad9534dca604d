/**
 * A child process with its output in a log file, a bounded tail in memory, and the three ways the
 * soak ends one: kill -9 (a crash), SIGTERM with a deadline (a clean stop), and waiting for it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';

export interface ChildOptions {
  /** For log lines, e.g. `app#2`. */
  name: string;
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  /** Output of every start of this child is appended here. */
  logFile: string;
  cwd?: string;
}

export class Child {
  readonly name: string;
  readonly process: ChildProcess;
  readonly pid: number;
  /** Resolves with the exit code, or the signal's name, once the process has exited. */
  readonly exited: Promise<number | string>;
  private readonly tail: string[] = [];
  private readonly lineWaiters = new Set<{ pattern: RegExp; resolve: (line: string) => void }>();
  private exitValue: number | string | undefined;
  private readonly log: WriteStream;

  constructor(options: ChildOptions) {
    this.name = options.name;
    this.log = createWriteStream(options.logFile, { flags: 'a' });
    this.log.write(`\n--- ${new Date().toISOString()} start ${options.name}\n`);
    this.process = spawn(options.command, options.args, {
      env: options.env,
      cwd: options.cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    if (this.process.pid === undefined) throw new Error(`${options.name}: spawn failed`);
    this.pid = this.process.pid;
    let partial = '';
    const onData = (chunk: Buffer) => {
      const lines = (partial + chunk.toString('utf8')).split('\n');
      partial = lines.pop() ?? '';
      const at = new Date().toISOString().slice(11, 23);
      for (const line of lines) {
        this.log.write(`${at} ${line}\n`);
        this.onLine(line);
      }
    };
    this.process.stdout!.on('data', onData);
    this.process.stderr!.on('data', onData);
    this.exited = new Promise((resolve) => {
      this.process.once('exit', (code, signal) => {
        this.exitValue = code ?? signal ?? 'unknown';
        this.log.write(`--- ${new Date().toISOString()} exit ${options.name}: ${String(this.exitValue)}\n`);
        this.log.end();
        resolve(this.exitValue);
      });
    });
  }

  /** Whether the process is still running. */
  get alive(): boolean {
    return this.exitValue === undefined;
  }

  /** The last lines of output, for failure reports. */
  lastLines(count = 20): string[] {
    return this.tail.slice(-count);
  }

  /** Resolves with the first line matching `pattern`; rejects when the process exits first or after `timeoutMs`. */
  waitForLine(pattern: RegExp, timeoutMs: number): Promise<string> {
    const found = this.tail.find((line) => pattern.test(line));
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const waiter = {
        pattern,
        resolve: (line: string) => {
          clearTimeout(timer);
          resolve(line);
        },
      };
      const timer = setTimeout(() => {
        this.lineWaiters.delete(waiter);
        reject(new Error(`${this.name}: no line matching ${pattern} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.lineWaiters.add(waiter);
      void this.exited.then((value) => {
        if (!this.lineWaiters.delete(waiter)) return;
        clearTimeout(timer);
        reject(
          new Error(
            `${this.name} exited (${String(value)}) before printing ${pattern}:\n${this.lastLines().join('\n')}`,
          ),
        );
      });
    });
  }

  /** A crash: SIGKILL, then wait for the exit. */
  async kill9(): Promise<void> {
    if (!this.alive) return;
    this.process.kill('SIGKILL');
    await this.exited;
  }

  /** A clean stop: SIGTERM, then SIGKILL if it has not exited within `graceMs`. */
  async stop(graceMs = 10_000): Promise<void> {
    if (!this.alive) return;
    this.process.kill('SIGTERM');
    const timer = setTimeout(() => this.process.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  private onLine(line: string): void {
    this.tail.push(line);
    if (this.tail.length > 200) this.tail.splice(0, this.tail.length - 200);
    for (const waiter of this.lineWaiters) {
      if (waiter.pattern.test(line)) {
        this.lineWaiters.delete(waiter);
        waiter.resolve(line);
      }
    }
  }
}
