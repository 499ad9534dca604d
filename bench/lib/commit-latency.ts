/**
 * How long this database takes to make one commit durable: the median of 200 autocommitted
 * `SELECT txid_current()` on one connection (each assigns a transaction id, so its commit writes a
 * commit record and, with synchronous_commit on, waits for the WAL flush).
 *
 * Why the report carries it: ratios against a write path move with it. On a disk whose fdatasync
 * took 4.2 ms, halving commits per task put idem's claims worker ahead of graphile-worker (two
 * commits per job); on one that took 0.16 ms (pg_test_fsync), commits cost little and both were
 * bound by CPU, at about parity. A replay (one read) against a transactional endpoint shifts the
 * same way.
 */
import pg from 'pg';

export async function measureCommitLatencyMs(databaseUrl: string): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    for (let i = 0; i < 20; i++) await client.query('SELECT txid_current()');
    const samples: number[] = [];
    for (let i = 0; i < 200; i++) {
      const started = performance.now();
      await client.query('SELECT txid_current()');
      samples.push(performance.now() - started);
    }
    samples.sort((a, b) => a - b);
    return Math.round(samples[samples.length >> 1]! * 1000) / 1000;
  } finally {
    await client.end();
  }
}
