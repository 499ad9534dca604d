/**
 * The SQL floor of each recording design: the statements idem sends for a first execution, sent
 * raw (same texts, same prepared-statement names, same pool) with no library code around them.
 * A design cannot run faster than its floor on the same driver and database, so idem's distance
 * from it is what idem's own JavaScript costs.
 */
import { canCommitWith, queryAndCommit, type Queryable, type Sql } from '../../src/core/sql.js';
import type { Statements } from '../../src/operations/statements.js';

/**
 * - `claim`: read; BEGIN; claim; the business write; complete; COMMIT (claim-first).
 * - `commit-read`: read; BEGIN; the business write; record; COMMIT (commit-time, read in front).
 * - `commit`: BEGIN; the business write; record; COMMIT (commit-time, no read).
 *
 * On a pool in node-postgres's pipeline mode, BEGIN goes out with the business write and the
 * record with COMMIT, as idem sends them there (src/adapters/pg-pipeline.ts).
 */
export type FloorDesign = 'claim' | 'commit-read' | 'commit';

export const floorDesigns: readonly FloorDesign[] = ['claim', 'commit-read', 'commit'];

const far = 1e9;
/** A fingerprint as long as idem's (SHA-256, hex), so the rows written are the same size. */
const fingerprint = 'f'.repeat(64);
/** The causation columns (intent, traceparent), last: null, as idem writes them outside any intent or trace. */
const noCause = [null, null];

export async function floorStatements<T>(
  sql: Sql,
  statements: Statements,
  design: FloorDesign,
  key: string,
  write: (tx: Queryable) => Promise<T>,
): Promise<T> {
  const scope = ['acme', 'create-item', key];
  const now = new Date();
  const until = new Date(now.getTime() + far);
  if (design !== 'commit') await sql.query(statements.read, scope, statements.names.read);
  return sql.transaction(async (tx) => {
    if (design === 'claim') {
      await tx.query(
        statements.claim,
        [...scope, fingerprint, null, now, until, until, '5000ms', ...noCause],
        statements.names.claim,
      );
    }
    const value = await write(tx);
    const json = JSON.stringify(value ?? null);
    if (design === 'claim') {
      await tx.query(
        statements.complete,
        [...scope, 1, 'completed', json, Buffer.from(json), null, null, now],
        statements.names.complete,
      );
    } else {
      const params = [
        ...scope,
        fingerprint,
        'completed',
        json,
        Buffer.from(json),
        null,
        null,
        now,
        until,
        until,
        '5000ms',
        ...noCause,
      ];
      // A pipelined pool: the record goes out with COMMIT, as idem sends it there.
      if (canCommitWith(tx)) {
        await tx[queryAndCommit](statements.recordOrFail, params, statements.names.recordOrFail);
      } else {
        await tx.query(statements.record, params, statements.names.record);
      }
    }
    return value;
  });
}
