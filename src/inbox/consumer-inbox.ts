/**
 * What the broker consumers (RabbitMQ, NATS JetStream) do with the inbox, written once: run a
 * message's handler once per id in the inbox's transaction, record a message given up on as dead,
 * count what happened, and report the errors a consumer survives.
 */
import type { Transaction } from '../core/sql.js';
import { describeError } from '../core/describe-error.js';
import type { Inbox, InboxContext } from './inbox.js';

export interface ConsumerCounters {
  processed: number;
  duplicates: number;
  retried: number;
  dead: number;
}

/** A message given up on, as its inbox record keeps it. */
export interface DeadDelivery {
  attempts: number;
  /** `describeError` of the last failure. */
  error: string;
  /** Where it came from: the queue, or `<stream>/<subject>`. */
  origin: string;
  payload: Uint8Array;
  headers: Record<string, string>;
}

export class ConsumerInbox<Client, Message> {
  readonly counters: ConsumerCounters = { processed: 0, duplicates: 0, retried: 0, dead: 0 };

  /** `label` names the consumer in reports, e.g. `rabbitmq orders`. */
  constructor(
    private readonly options: {
      inbox: Inbox<Client>;
      consumer: string;
      handler: (tx: Transaction<Client>, message: Message, context: InboxContext) => Promise<void>;
      onError?: (error: unknown) => void;
      /** Record dead messages in the inbox. */
      recordDead: boolean;
    },
    private readonly label: string,
  ) {}

  /** Runs the handler once per message id; resolves true when the id was processed before. */
  async handle(messageId: string, tenant: string | undefined, message: Message): Promise<boolean> {
    const result = await this.options.inbox.handle(this.key(messageId, tenant), (tx, context) =>
      this.options.handler(tx, message, context),
    );
    return result.duplicate;
  }

  /** Records a message given up on as dead (unless `recordDead` is off). */
  async markDead(messageId: string, tenant: string | undefined, dead: DeadDelivery): Promise<void> {
    if (this.options.recordDead)
      await this.options.inbox.markDead({ ...this.key(messageId, tenant), ...dead });
  }

  /** Counts a delivery acked after its commit. */
  acked(duplicate: boolean): void {
    if (duplicate) this.counters.duplicates++;
    else this.counters.processed++;
  }

  /** Reports an error the consumer survives: to `onError`, else one line on stderr. */
  report(error: unknown): void {
    if (this.options.onError) this.options.onError(error);
    else console.error(`[idem inbox] ${this.label}: ${describeError(error)}`);
  }

  private key(messageId: string, tenant: string | undefined) {
    return { consumer: this.options.consumer, messageId, ...(tenant === undefined ? {} : { tenant }) };
  }
}
