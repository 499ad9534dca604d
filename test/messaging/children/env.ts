/** Shared by the child processes: configuration from the environment, and a hard crash. */
import { writeSync } from 'node:fs';
import pg from 'pg';
import { fromPg } from 'idem/pg';
import { createInbox, type Inbox } from 'idem/inbox';

export function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`child: ${name} is not set`);
  return value;
}

/** Prints synchronously (a pipe write would be lost to the SIGKILL), then dies like a crash. */
export function crash(reason: string): never {
  writeSync(1, `crashing: ${reason}\n`);
  process.kill(process.pid, 'SIGKILL');
  throw new Error('unreachable');
}

export function say(line: string): void {
  writeSync(1, `${line}\n`);
}

/** A consumer child's inbox: on DATABASE_URL (two connections), in SCHEMA. */
export function childInbox(): { schema: string; inbox: Inbox } {
  const schema = env('SCHEMA');
  const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 2 });
  return { schema, inbox: createInbox({ sql: fromPg(pool), schema }) };
}
