/**
 * A dispatcher process that crashes (SIGKILL) at a chosen moment:
 * - CRASH=after-publish: every event of the batch was published and confirmed, none marked (seed
 *   scenario 6: the next dispatcher publishes them again).
 * - CRASH=mid-batch: half the batch was published, then the process dies.
 */
import pg from 'pg';
import { fromPg } from 'idem/pg';
import { createInbox } from 'idem/inbox';
import {
  createInDatabasePublisher,
  createOutboxDispatcher,
  createRabbitMqPublisher,
  type Publisher,
} from 'idem/outbox';
import { crash, env, say } from './env.js';

const schema = env('SCHEMA');
const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 4 });
const sql = fromPg(pool);
const inner: Publisher =
  env('TRANSPORT') === 'rabbitmq'
    ? createRabbitMqPublisher({
        connection: env('AMQP_URL'),
        route: () => ({ exchange: '', routingKey: env('QUEUE') }),
      })
    : createInDatabasePublisher({
        inbox: createInbox({ sql, schema }),
        subscribers: [
          {
            consumer: env('CONSUMER'),
            handler: async (tx, event) => {
              await tx.query(`INSERT INTO "${schema}".effects (message_id) VALUES ($1)`, [event.id]);
            },
          },
        ],
      });
const mode = env('CRASH');
const publisher: Publisher = {
  async publish(events, signal) {
    if (mode === 'mid-batch') {
      const results = await inner.publish(events.slice(0, Math.ceil(events.length / 2)), signal);
      if (!results.every((r) => r.ok)) throw new Error('child: publish failed');
      crash(`published ${results.length} of ${events.length}, marked none`);
    }
    const results = await inner.publish(events, signal);
    if (!results.every((r) => r.ok)) throw new Error('child: publish failed');
    crash(`published ${results.length}, marked none`);
  },
};
say('ready');
await createOutboxDispatcher({ sql, publisher, schema, batchSize: Number(process.env.BATCH ?? 500) }).drain();
say('drained without crashing');
process.exit(3);
