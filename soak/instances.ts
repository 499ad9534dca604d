/**
 * The demo's app instances, each a child process running the demo as `npm start` does (HTTP, outbox dispatcher,
 * broker consumer, webhook processor and receipt worker), started, killed with SIGKILL and
 * started again on the same port.
 */
import { join } from 'node:path';
import { Child } from './child.js';
import { freePort } from './ports.js';

export interface InstanceEnvironment {
  databaseUrl: string;
  schema: string;
  providerUrl: string;
  leaseMs: number;
  /** AMQP_URL or NATS_URL, or nothing for the in-database transport. */
  broker: Record<string, string>;
  runDir: string;
  repoDir: string;
}

export class AppInstance {
  readonly name: string;
  child: Child | undefined;
  /** Client requests sent to this instance that have not been answered. */
  inflight = 0;
  starts = 0;
  private starting: Promise<void> | undefined;

  private constructor(
    readonly index: number,
    readonly port: number,
    private readonly environment: InstanceEnvironment,
  ) {
    this.name = `app#${index}`;
  }

  static async create(index: number, environment: InstanceEnvironment): Promise<AppInstance> {
    return new AppInstance(index, await freePort(), environment);
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get up(): boolean {
    return this.child?.alive === true && this.starting === undefined;
  }

  get pid(): number | undefined {
    return this.child?.alive ? this.child.pid : undefined;
  }

  /** Starts the process and resolves once it answers `/healthz`. */
  start(timeoutMs = 90_000): Promise<void> {
    this.starting ??= this.launch(timeoutMs).finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  /** kill -9. */
  async kill9(): Promise<void> {
    await this.child?.kill9();
  }

  async stop(): Promise<void> {
    await this.starting?.catch(() => undefined);
    await this.child?.stop(15_000);
  }

  private async launch(timeoutMs: number): Promise<void> {
    const e = this.environment;
    const env: NodeJS.ProcessEnv = { ...process.env };
    // The transport is chosen by which URL is set: never inherit the parent's.
    delete env.AMQP_URL;
    delete env.NATS_URL;
    Object.assign(env, e.broker, {
      PORT: String(this.port),
      HOST: '127.0.0.1',
      PROVIDER_URL: e.providerUrl,
      DATABASE_URL: e.databaseUrl,
      IDEM_SCHEMA: e.schema,
      LEASE_MS: String(e.leaseMs),
    });
    this.starts++;
    this.child = new Child({
      name: this.name,
      command: process.execPath,
      args: ['--import', 'tsx', 'demo/main.ts'], // what `npm start` runs
      env,
      cwd: e.repoDir,
      logFile: join(e.runDir, `${this.name.replace('#', '-')}.log`),
    });
    await this.child.waitForLine(/idem demo listening on/, timeoutMs);
  }
}
