/** A JetStream consumer process that commits and then dies by SIGKILL instead of acking (seed scenario 4). */
import { createJetStreamConsumer } from 'idem/inbox';
import { childInbox, crash, env, say } from './env.js';

const { schema, inbox } = childInbox();

const consumer = createJetStreamConsumer({
  inbox,
  consumer: env('CONSUMER'),
  connection: { servers: env('NATS_URL') },
  stream: env('STREAM'),
  durable: env('DURABLE'),
  create: false,
  handler: async (tx, message) => {
    await tx.query(`INSERT INTO "${schema}".effects (message_id) VALUES ($1)`, [message.id]);
    // Runs after this handler's COMMIT and before the ack: replace the ack with a crash.
    message.raw.ackAck = () => crash('committed, not acked');
  },
});
await consumer.start();
say('ready');
