import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { runDemo } from '../../examples/polling-agent/demo.js';
import { databaseUrl } from '../support/database.js';

describe('polling-agent example: two agents, random SIGKILLs and SIGSTOP freezes', () => {
  const schema = `idem_test_agents_${randomBytes(4).toString('hex')}`;
  afterAll(async () => {
    const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it('sends exactly one notification per task through the outbox', { timeout: 180_000 }, async () => {
    const lines: string[] = [];
    const result = await runDemo({
      databaseUrl: databaseUrl(),
      schema,
      tasks: 30,
      agents: 2,
      leaseMs: 700,
      thinkMs: 300,
      chaosEveryMs: [300, 900],
      timeoutMs: 150_000,
      log: (line) => lines.push(line),
    });
    const summary = {
      completed: result.completed,
      kills: result.kills,
      freezes: result.freezes,
      refused: result.fencedRefusals,
    };
    // The chaos really happened: agents were killed at work, and one was frozen mid-task past its lease.
    expect(result.kills, JSON.stringify(summary)).toBeGreaterThanOrEqual(2);
    expect(result.freezes, JSON.stringify(summary)).toBeGreaterThanOrEqual(1);
    expect(result.completed).toBe(result.tasks);
    const notOne = (counts: Map<string, number>) => [...counts].filter(([, n]) => n !== 1);
    expect(result.events.size).toBe(result.tasks);
    expect(notOne(result.events)).toEqual([]);
    expect(result.sent.size).toBe(result.tasks);
    expect(notOne(result.sent)).toEqual([]);
    console.log(
      `[polling-agent] ${result.tasks} tasks in ${result.seconds.toFixed(1)} s: ${result.kills} kills, ` +
        `${result.freezes} freezes, ${result.fencedRefusals} zombie completions refused, ${result.agentStarts} agent starts`,
    );
  });
});
