import type { Clock } from '../core/clock.js';
import type { IdemEvents } from '../core/event-channel.js';
import type { Sql } from '../core/sql.js';
import type { HandlerLookup } from './handlers.js';
import type { ResolvedProcessorOptions } from './processor-options.js';
import type { ReceiptStatements } from './statements.js';

/** What the claim loop and the ordering engine read: one processor's tables, handlers and options. */
export interface ProcessorContext<Client> {
  sql: Sql<Client>;
  clock: Clock;
  events: IdemEvents;
  statements: ReceiptStatements;
  options: ResolvedProcessorOptions;
  handlerFor: HandlerLookup<Client>;
  /** Wakes idle workers: receipts were made due. */
  notify(): void;
}
