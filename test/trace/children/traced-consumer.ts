/**
 * A consumer process of its own, with its own tracer: it consumes one message from a RabbitMQ
 * queue through the inbox and prints, as one JSON line, the headers it received and the spans it
 * recorded, then exits. The test (another process) checks that the consumer joined its trace.
 */
import { writeSync } from 'node:fs';
import pg from 'pg';
import { fromPg } from 'idem/pg';
import { createEvents } from 'idem';
import { createInbox, createRabbitMqConsumer } from 'idem/inbox';
import { installMemoryTracer } from '../memory-tracer.js';

const spans = installMemoryTracer();
const env = (name: string) => process.env[name] ?? '';
const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 2 });
const events = createEvents();
const inbox = createInbox({ sql: fromPg(pool), schema: env('SCHEMA'), events });
let headers: Record<string, unknown> = {};
const consumer = createRabbitMqConsumer({
  inbox,
  consumer: 'ledger',
  queue: env('QUEUE'),
  connection: env('AMQP_URL'),
  handler: (_tx, message) => {
    headers = message.headers;
    return Promise.resolve();
  },
});
events.on('inbox:processed', () => {
  writeSync(1, `RESULT ${JSON.stringify({ headers, spans })}\n`);
  void consumer.stop().then(() => pool.end());
});
await consumer.start();
writeSync(1, 'ready\n');
