/**
 * `idem example`: a small keyed operation end to end, on DATABASE_URL or an embedded PostgreSQL.
 * It shows a first execution, a replay, a concurrent burst, a reused key and a business refusal.
 */
import { randomUUID } from 'node:crypto';
import { isKeyReused } from '../../core/errors.js';
import { migrate } from '../../migrate/migrate.js';
import { createIdem } from '../../operations/idem.js';
import { refused } from '../../operations/outcome.js';
import { parseCommand } from '../args.js';
import { openDatabase } from '../database.js';

const usage = `usage: idem example

Runs a small keyed operation end to end in schema idem_example: a first execution, a retry, 20
concurrent retries, the key reused with another payload, and a declined card replayed. Exit code 0
when each has exactly one effect. The database is DATABASE_URL, else an embedded PostgreSQL.`;

export async function run(argv: string[]): Promise<number> {
  const args = parseCommand('example', usage, argv, {});
  if (args.exitCode !== undefined) return args.exitCode;
  const db = await openDatabase({ allowEmbedded: true });
  try {
    const schema = 'idem_example';
    await migrate(db.sql, { schema });
    await db.pool.query(
      `CREATE TABLE IF NOT EXISTS ${schema}.orders (id serial PRIMARY KEY, tenant text NOT NULL, total int NOT NULL)`,
    );
    const idem = createIdem({ sql: db.sql, schema });
    const key = randomUUID();
    const createOrder = (total: number) =>
      idem.run({ tenant: 'acme', operation: 'create-order', key, request: { total } }, async (tx) => {
        const { rows } = await tx.query<{ id: number }>(
          `INSERT INTO ${schema}.orders (tenant, total) VALUES ('acme', $1) RETURNING id`,
          [total],
        );
        return { orderId: rows[0]!.id, total };
      });

    const first = await createOrder(4200);
    console.log(`1. first execution      → order ${first.value.orderId} (replayed: ${first.replayed})`);
    const retry = await createOrder(4200);
    console.log(`2. retry, same key       → order ${retry.value.orderId} (replayed: ${retry.replayed})`);

    const burstKey = randomUUID();
    const burst = await Promise.all(
      Array.from({ length: 20 }, () =>
        idem.run(
          { tenant: 'acme', operation: 'create-order', key: burstKey, request: { total: 99 } },
          async (tx) => {
            const { rows } = await tx.query<{ id: number }>(
              `INSERT INTO ${schema}.orders (tenant, total) VALUES ('acme', 99) RETURNING id`,
            );
            return { orderId: rows[0]!.id };
          },
        ),
      ),
    );
    const orderIds = new Set(burst.map((r) => r.value.orderId));
    console.log(
      `3. 20 concurrent retries → ${orderIds.size} order, ${burst.filter((r) => r.replayed).length} replays`,
    );

    const reused = await createOrder(1).catch((error: unknown) => error);
    console.log(`4. same key, new payload → ${isKeyReused(reused) ? reused.code : 'NOT REFUSED'}`);

    const declineKey = randomUUID();
    const charge = () =>
      idem.run(
        { tenant: 'acme', operation: 'charge', key: declineKey, request: { card: 'declined' } },
        async () => refused({ error: 'card_declined' }),
      );
    const declined = await charge();
    const declinedAgain = await charge();
    console.log(
      `5. declined card          → ${declined.state}, retry → ${declinedAgain.state} (replayed: ${declinedAgain.replayed})`,
    );

    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${schema}.orders WHERE id = ANY($1)`,
      [[first.value.orderId, ...orderIds]],
    );
    const ok =
      rows[0]!.n === 2 &&
      retry.replayed &&
      orderIds.size === 1 &&
      isKeyReused(reused) &&
      declinedAgain.replayed;
    console.log(ok ? '\nExactly one effect per intent.' : '\nUNEXPECTED RESULT');
    return ok ? 0 : 1;
  } finally {
    await db.close();
  }
}
