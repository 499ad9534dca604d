import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { run } from '../../src/cli/commands/outbox.js';
import { createOutboxDispatcher } from '../../src/outbox/dispatcher.js';
import { createOutbox, type Outbox } from '../../src/outbox/outbox.js';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { RecordingPublisher } from './support.js';
import { printedBy } from '../support/console-output.js';

let db: TestSchema;
let outbox: Outbox;

beforeAll(async () => {
  db = await createTestSchema();
  outbox = createOutbox({ sql: fromPg(db.pool), schema: db.schema });
  process.env.DATABASE_URL = databaseUrl();
});
afterAll(() => db.close());

/** Adds events and parks the first of their key as dead. Returns [dead id, parked id]. */
async function parkTwo(topic: string): Promise<[string, string]> {
  const sql = fromPg(db.pool);
  const ids = await sql.transaction((tx) =>
    outbox.addMany(tx, [
      { topic, key: 'k', type: 'first', payload: 1 },
      { topic, key: 'k', type: 'second', payload: 2 },
    ]),
  );
  const publisher = new RecordingPublisher();
  publisher.refuse = () => true;
  publisher.permanent = true;
  await createOutboxDispatcher({ sql, publisher, schema: db.schema, topics: [topic] }).drain();
  return [ids[0]!, ids[1]!];
}

/** Both streams as one, in the order printed. */
const capture = async (argv: string[]) => {
  const { code, all } = await printedBy(() => run(argv));
  return { code, out: all };
};

describe('idem outbox', () => {
  it('stats and dead list what is parked', async () => {
    const [deadId] = await parkTwo('cli-stats');
    const stats = await capture(['stats', '--schema', db.schema, '--topic', 'cli-stats']);
    expect(stats.code).toBe(0);
    expect(JSON.parse(stats.out)).toMatchObject({ dead: 1, parked: 1, pending: 1 });
    const dead = await capture(['dead', '--schema', db.schema, '--topic', 'cli-stats']);
    expect(dead.out).toContain(deadId);
    expect(dead.out).toContain('refused first');
  });

  it('redrive refuses to run without a filter, and needs --all for everything', async () => {
    const result = await capture(['redrive', '--schema', db.schema]);
    expect(result.code).toBe(2);
    expect(result.out).toContain('--all');
  });

  it('`idem outbox redrive --id` through the real CLI revives the event and releases its key', async () => {
    const [deadId, parkedId] = await parkTwo('cli-redrive');
    const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', main, 'outbox', 'redrive', '--schema', db.schema, '--id', deadId],
      { env: { ...process.env, DATABASE_URL: databaseUrl() } },
    );
    expect(stdout).toContain('revived 1 dead events, released 1 events');
    const revived = await outbox.get({ id: deadId });
    expect(revived).toMatchObject({ deadAt: null, attempts: 0 });
    const publisher = new RecordingPublisher();
    await createOutboxDispatcher({
      sql: fromPg(db.pool),
      publisher,
      schema: db.schema,
      topics: ['cli-redrive'],
    }).drain();
    expect(publisher.ids()).toEqual([deadId, parkedId]);
  });
});
