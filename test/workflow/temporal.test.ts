import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { createResilientClient } from '../../src/client/index.js';
import { isKeyReused } from '../../src/core/errors.js';
import { createIdem } from '../../src/operations/idem.js';
import {
  activityKey,
  activityScope,
  runActivity,
  runActivitySteps,
  type ActivityContextLike,
} from '../../src/workflow/index.js';
import { startProvider, type Provider } from '../support/client/provider.js';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';

const child = fileURLToPath(new URL('./support/activity-child.ts', import.meta.url));

function fakeContext(
  overrides: Partial<ActivityContextLike['info']> = {},
  runId = 'run-1',
): ActivityContextLike {
  return {
    info: {
      workflowExecution: { workflowId: 'order-workflow-42', runId },
      activityId: '1',
      activityType: 'chargeCard',
      workflowNamespace: 'default',
      attempt: 1,
      ...overrides,
    },
  };
}

describe('Temporal activity keys (fake activity context, no server)', () => {
  it('derive from workflow id + activity id, never from run id or attempt', () => {
    const first = activityKey(fakeContext({}, 'run-1'));
    expect(activityKey(fakeContext({ attempt: 7 }, 'run-2'))).toBe(first);
    expect(
      activityKey({
        info: { ...fakeContext().info, workflowExecution: { workflowId: 'order-workflow-42' } },
      }),
    ).toBe(first);
    expect(activityKey(fakeContext({ activityId: '2' }))).not.toBe(first);
    expect(
      activityKey(fakeContext({ workflowExecution: { workflowId: 'order-workflow-43', runId: 'run-1' } })),
    ).not.toBe(first);
    expect(activityKey(fakeContext({ workflowNamespace: 'other' }))).not.toBe(first);
    expect(activityKey(fakeContext(), 'refund')).not.toBe(first);
    expect(activityKey(fakeContext(), 'refund')).toBe(activityKey(fakeContext({}, 'run-9'), 'refund'));
    expect(first).toMatch(/^idem_[A-Za-z0-9_-]{43}$/);
    expect(activityScope(fakeContext())).toEqual({
      tenant: 'default',
      operation: 'temporal:chargeCard',
      key: first,
    });
    expect(() => activityKey({ info: { ...fakeContext().info, activityId: '' } })).toThrow(/activityId/);
  });
});

describe('seed scenario 7: an activity finishes its external call, then its process dies', () => {
  let db: TestSchema;
  let provider: Provider;

  beforeAll(async () => {
    db = await createTestSchema();
    provider = await startProvider();
    await db.pool.query(
      `CREATE TABLE "${db.schema}".charges (id serial PRIMARY KEY, order_id text NOT NULL, provider_id text NOT NULL)`,
    );
  });
  afterAll(async () => {
    await provider.stop();
    await db.close();
  });

  /** Runs one activity attempt in a child process; with `crash`, SIGKILLs it after the provider answered. */
  async function attempt(runId: string, attemptNo: number, crash: boolean): Promise<string> {
    const proc = spawn(process.execPath, ['--import', 'tsx', child], {
      env: {
        ...process.env,
        DATABASE_URL: databaseUrl(),
        SCHEMA: db.schema,
        PROVIDER_URL: provider.url,
        WORKFLOW_ID: 'order-workflow-42',
        ACTIVITY_ID: '1',
        RUN_ID: runId,
        ATTEMPT: String(attemptNo),
        MODE: crash ? 'crash-after-call' : 'normal',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    proc.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (crash && out.includes('CALLED')) proc.kill('SIGKILL');
    });
    proc.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
      proc.on('exit', (c, s) => resolve([c, s])),
    );
    if (crash) expect(signal).toBe('SIGKILL');
    else expect([code, err]).toEqual([0, '']);
    return out;
  }

  it('the retry sends the same key (new run id, next attempt), the downstream makes one effect', async () => {
    const crashed = await attempt('run-1', 1, true);
    const key = /CALLED (\S+)/.exec(crashed)![1]!;
    expect(provider.effectsOf('charge')).toBe(1);
    const { rows: before } = await db.pool.query(`SELECT * FROM "${db.schema}".charges`);
    expect(before).toHaveLength(0); // nothing was recorded: the process died first

    // Temporal retries the activity (here even in a new workflow run): the same key goes downstream.
    const retried = await attempt('run-2', 2, false);
    const charge = JSON.parse(/DONE (.+)/.exec(retried)![1]!) as { chargeId: string; key: string };
    expect(charge.key).toBe(key);
    expect(provider.requests.map((r) => r.key)).toEqual([key, key]);
    expect(provider.effectsOf('charge')).toBe(1);
    const { rows } = await db.pool.query<{ provider_id: string }>(`SELECT * FROM "${db.schema}".charges`);
    expect(rows.map((r) => r.provider_id)).toEqual([charge.chargeId]);

    // A third attempt (a lost completion report) replays the recorded result without calling out.
    const replayed = await attempt('run-3', 3, false);
    expect(JSON.parse(/DONE (.+)/.exec(replayed)![1]!)).toEqual(charge);
    expect(provider.requests).toHaveLength(2);
  });

  it('runActivity in-process: replays, refuses other arguments, and runActivitySteps keys each step', async () => {
    const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema });
    const client = createResilientClient({ baseUrl: provider.url, breaker: false });
    const context = fakeContext({ activityId: 'ship-1', activityType: 'ship' });
    let calls = 0;
    const ship = () =>
      runActivity(
        idem,
        context,
        async (_tx, { key }) => {
          calls++;
          await client.fetch('/effects/ship', { method: 'POST', body: '{}' });
          return key;
        },
        { request: { parcel: 1 } },
      );
    const key = await ship();
    expect(await ship()).toBe(key);
    expect(calls).toBe(1);
    expect(provider.requests.at(-1)!.key).toBe(key);
    await expect(
      runActivity(idem, context, async () => 'other', { request: { parcel: 2 } }),
    ).rejects.toSatisfy(isKeyReused);

    const stepsContext = fakeContext({ activityId: 'multi-1', activityType: 'reserveAndCharge' });
    const keys = await runActivitySteps(idem, stepsContext, async (op) => {
      const reserve = await op.call('reserve', async ({ signal }) => {
        await client.fetch('/effects/reserve', { method: 'POST', body: '{}', signal });
        return provider.requests.at(-1)!.key;
      });
      const pay = await op.call('pay', async () => {
        await client.fetch('/effects/pay', { method: 'POST', body: '{}' });
        return provider.requests.at(-1)!.key;
      });
      return [reserve, pay, op.deriveKey('reserve'), op.deriveKey('pay')];
    });
    expect(keys[0]).toBe(keys[2]);
    expect(keys[1]).toBe(keys[3]);
    expect(keys[0]).not.toBe(keys[1]);
  });
});
