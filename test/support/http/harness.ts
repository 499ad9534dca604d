/**
 * Everything one framework's contract suite runs against: a fresh schema on the real PostgreSQL
 * with idem's tables and the test's business tables, an Idem on a clock the test can move, a real
 * HTTP "provider" for multi-step handlers, gates to hold handlers at a point, and counters.
 */
import { type Clock, createIdem, type Idem } from 'idem';
import { fromPg } from 'idem/pg';
import type { Recording } from '../recordings.js';
import { createTestSchema, type TestSchema } from '../database.js';
import { startProvider, type Provider } from './provider.js';
import { waitFor } from '../poll.js';

/** Real time plus an offset the test moves forward: expiry and leases without sleeping. */
export class OffsetClock implements Clock {
  offset = 0;
  now(): number {
    return Date.now() + this.offset;
  }
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }
  advance(ms: number): void {
    this.offset += ms;
  }
}

/** Named points where a handler waits until the test opens them. */
export class Gates {
  private gates = new Map<string, { open: () => void; opened: Promise<void>; waiting: number }>();

  private get(name: string) {
    let gate = this.gates.get(name);
    if (!gate) {
      let open!: () => void;
      const opened = new Promise<void>((resolve) => (open = resolve));
      gate = { open, opened, waiting: 0 };
      this.gates.set(name, gate);
    }
    return gate;
  }

  /** Called by a handler. Bounded, so a broken test fails instead of hanging. */
  async wait(name: string, timeoutMs = 15_000): Promise<void> {
    const gate = this.get(name);
    gate.waiting++;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`gate ${name} was never opened`)), timeoutMs);
    });
    try {
      await Promise.race([gate.opened, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  open(name: string): void {
    this.get(name).open();
  }

  /** Resolves once a handler is waiting at `name`. */
  async reached(name: string): Promise<void> {
    await until(() => this.get(name).waiting > 0, `a handler to reach gate ${name}`);
  }
}

export interface Harness {
  db: TestSchema;
  schema: string;
  idem: Idem;
  clock: OffsetClock;
  gates: Gates;
  provider: Provider;
  /** Handler runs per `tenant:key`. */
  runs: Map<string, number>;
  /** Requests the HTTP server has received (all routes). */
  arrivals: { count: number };
  /** Set in a child process: kills it on the spot (SIGKILL), as a crash would. */
  crash?: () => never;
  close(): Promise<void>;
}

/** Options of `createHarness`. */
export interface HarnessOptions {
  /** The Idem instance's recording, which transaction-mode routes follow. Default: idem's default. */
  recording?: Recording;
}

export async function createHarness(options: HarnessOptions = {}): Promise<Harness> {
  const db = await createTestSchema({ poolSize: 8 });
  const s = `"${db.schema}"`;
  await db.pool.query(`
    CREATE TABLE ${s}.orders (id serial PRIMARY KEY, tenant text NOT NULL, key text NOT NULL, amount int NOT NULL, note text);
    CREATE TABLE ${s}.payments (id serial PRIMARY KEY, tenant text NOT NULL, key text NOT NULL, status text NOT NULL, charge text);
    CREATE TABLE ${s}.flaky (id serial PRIMARY KEY, key text NOT NULL);
    CREATE TABLE ${s}.blobs (id serial PRIMARY KEY, key text NOT NULL, kind text NOT NULL);
    -- A business table whose COMMIT fails while commit_switch says so: the constraint trigger is
    -- DEFERRABLE INITIALLY DEFERRED, so it runs at COMMIT, after the handler and idem's writes.
    CREATE TABLE ${s}.commit_switch (fail boolean NOT NULL);
    INSERT INTO ${s}.commit_switch VALUES (false);
    CREATE TABLE ${s}.fragile (id serial PRIMARY KEY, key text NOT NULL);
    CREATE FUNCTION ${s}.refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF (SELECT fail FROM ${s}.commit_switch) THEN
        RAISE EXCEPTION 'fragile row refused at commit' USING ERRCODE = 'check_violation';
      END IF;
      RETURN NULL;
    END $$;
    CREATE CONSTRAINT TRIGGER fragile_at_commit AFTER INSERT ON ${s}.fragile
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ${s}.refuse_at_commit();
  `);
  const clock = new OffsetClock();
  const idem = createIdem({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock,
    ...(options.recording ? { recording: options.recording } : {}),
  });
  const provider = await startProvider();
  return {
    db,
    schema: db.schema,
    idem,
    clock,
    gates: new Gates(),
    provider,
    runs: new Map(),
    arrivals: { count: 0 },
    async close() {
      await provider.close();
      await db.close();
    },
  };
}

/** Polls `condition` every 10 ms for at most `timeoutMs`. */
export function until(
  condition: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  return waitFor(condition, what, timeoutMs, 10);
}
