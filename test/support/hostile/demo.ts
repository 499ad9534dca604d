/**
 * The payments demo under attack: started as `npm start` starts it (the console included, on its
 * own pool), on the in-database transport, with every table a request could touch counted, so a
 * refused request that stored anything shows as a count that moved.
 */
import { demoConsole } from '../../../demo/console.js';
import { randomSchema, type DemoHandle } from '../../../demo/server.js';
import { dropDemoSchemas, startTestDemo } from '../demo.js';
import { until } from '../poll.js';

/** Rows of every table a request could write, and the provider's charges. */
export interface DemoCounts {
  requests: number;
  /** Keys left pending: a stuck operation, whatever its cause. */
  pending: number;
  steps: number;
  payments: number;
  ledger: number;
  outbox: number;
  tasks: number;
  receipts: number;
  charges: number;
}

export interface HostileDemo {
  demo: DemoHandle;
  schema: string;
  port: number;
  /** The counts once every event of an accepted payment has reached the ledger. */
  counts(): Promise<DemoCounts>;
  close(): Promise<void>;
}

export async function startHostileDemo(): Promise<HostileDemo> {
  const schema = randomSchema('idem_hostile');
  const demo = await startTestDemo(schema, {
    amqpUrl: undefined,
    natsUrl: undefined,
    plugins: [demoConsole()],
  });
  return {
    demo,
    schema,
    port: Number(new URL(demo.url).port),
    async counts() {
      // An accepted payment's event reaches the ledger moments later; wait for it, so a count
      // that moves afterwards is the request under test, not an earlier one settling.
      await until(
        async () =>
          (
            await demo.pool.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM "${schema}".outbox WHERE published_at IS NULL AND dead_at IS NULL`,
            )
          ).rows[0]!.n,
        (n) => n === 0,
      );
      const { rows } = await demo.pool.query<Omit<DemoCounts, 'charges'>>(
        `SELECT (SELECT count(*)::int FROM "${schema}".requests) AS requests,
                (SELECT count(*)::int FROM "${schema}".requests WHERE state = 'pending') AS pending,
                (SELECT count(*)::int FROM "${schema}".steps) AS steps,
                (SELECT count(*)::int FROM "${schema}_demo".payments) AS payments,
                (SELECT count(*)::int FROM "${schema}_demo".ledger) AS ledger,
                (SELECT count(*)::int FROM "${schema}".outbox) AS outbox,
                (SELECT count(*)::int FROM "${schema}".tasks) AS tasks,
                (SELECT count(*)::int FROM "${schema}".webhook_receipts) AS receipts`,
      );
      return { ...rows[0]!, charges: demo.provider?.charges.size ?? 0 };
    },
    async close() {
      await demo.close();
      await dropDemoSchemas(schema);
    },
  };
}
