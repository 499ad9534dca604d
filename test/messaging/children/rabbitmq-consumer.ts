/**
 * A RabbitMQ consumer process whose handler commits and which then dies by SIGKILL instead of
 * acking (seed scenario 4). The ack is the moment between "committed" and "acked".
 */
import amqp from 'amqplib';
import { createRabbitMqConsumer } from 'idem/inbox';
import { childInbox, crash, env, say } from './env.js';

const { schema, inbox } = childInbox();

const consumer = createRabbitMqConsumer({
  inbox,
  consumer: env('CONSUMER'),
  queue: env('QUEUE'),
  prefetch: 1,
  // The same retry queues as the test's own consumer, so the test's cleanup deletes them.
  retryDelaysMs: [100],
  connection: async () => {
    const model = await amqp.connect(env('AMQP_URL'));
    const createConfirmChannel = model.createConfirmChannel.bind(model);
    model.createConfirmChannel = async (...args) => {
      const channel = await createConfirmChannel(...args);
      channel.ack = () => crash('committed, not acked');
      return channel;
    };
    return model;
  },
  handler: async (tx, message) => {
    await tx.query(`INSERT INTO "${schema}".effects (message_id) VALUES ($1)`, [message.id]);
  },
});
await consumer.start();
say('ready');
