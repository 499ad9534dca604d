// The example of docs/guide/keyed-operations.md. `npm run typecheck` compiles it, so the guide cannot
// drift from the API.
import pg from 'pg';
import { createIdem, isInProgress, isKeyReused, migrate, refused } from 'idem';
import { fromPg } from 'idem/pg';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const sql = fromPg(pool);
await migrate(sql); // or: npx idem migrate, or: npx idem sql > idem.sql for your own tool

const idem = createIdem({ sql, retention: { resultMs: 7 * 86_400_000, tombstoneMs: 30 * 86_400_000 } });

export async function createPayment(account: string, key: string, body: { amount: number; card: string }) {
  try {
    const result = await idem.run(
      { tenant: account, operation: 'create-payment', key, request: body },
      async (tx) => {
        // Your writes go through the same transaction as idem's record.
        const { rows } = await tx.query<{ id: string }>(
          'INSERT INTO payments (account, amount) VALUES ($1, $2) RETURNING id',
          [account, body.amount],
        );
        if (body.card.startsWith('declined')) return refused({ status: 'declined' }); // stored, replayed
        return { paymentId: rows[0]!.id, status: 'succeeded' };
      },
    );
    return { ...result.value, replayed: result.replayed };
  } catch (error) {
    if (isKeyReused(error)) return { error: 'this key was used for a different request' };
    if (isInProgress(error)) return { error: 'still running', retryAfterMs: error.retryAfterMs };
    throw error;
  }
}
