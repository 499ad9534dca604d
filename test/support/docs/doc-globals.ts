/**
 * What the documentation's TypeScript blocks take as given: the objects their prose has already
 * set up (`idem`, `sql`, `pool`, `app`, …) and the values a request or message at hand carries
 * (`orderId`, `key`, …). Written next to the blocks as a global declaration file when they are
 * type-checked, so a block that declares one of these names itself shadows it. Kept as text, not
 * a .d.ts in the project: these globals must never be visible to the code.
 */
export const docGlobals = `
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Express } from 'express';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Knex } from 'knex';
import type { IncomingMessage } from 'node:http';
import type pg from 'pg';
import type { DataSource } from 'typeorm';
import type { Idem, Queryable, Sql } from 'idem';
import type { ClaimedTask, Claims } from 'idem/claims';
import type { Inbox } from 'idem/inbox';
import type { Outbox, Publisher } from 'idem/outbox';
import type { SagaDefinition, Sagas } from 'idem/workflow';
// The client examples/prisma generates (its one model is Order), as an app's own generated client.
// Relative to where typecheck-blocks.ts writes this text (.idem/doc-blocks-<pid>/), not to here.
import type { PrismaClient } from '../../examples/prisma/generated/index.js';

declare global {
  const idem: Idem;
  const sql: Sql;
  const pool: pg.Pool;
  const dispatcherPool: pg.Pool;
  /** A pool whose URL is a pooler such as PgBouncer. */
  const pooledPool: pg.Pool;
  const publisher: Publisher;
  const app: Express;
  const outbox: Outbox;
  const inbox: Inbox;
  const claims: Claims;
  const sagas: Sagas;
  const checkoutSaga: SagaDefinition<{ orderId: string; amount: number }>;
  /** The ORMs of docs/orms.md, set up as their own documentation says. */
  const prisma: PrismaClient;
  const dataSource: DataSource;
  const knex: Knex;
  const orm: MikroORM;
  /** An entity of the app's (TypeORM, MikroORM). */
  class Order {
    id: number;
    tenant: string;
    amount: number;
    note?: string | null;
  }
  /** The business transaction at hand. */
  const tx: Queryable;
  const tenant: string;
  const key: string;
  const id: string;
  const orderId: string;
  const amount: number;
  const traceId: string;
  const messageId: string;
  const eventId: string;
  const queue: string;
  const url: string;
  const payment: { amount: number; currency: string; customer: string };
  const charge: { amount: number; currency: string };
  const provider: { charge(input: unknown, options?: { idempotencyKey: string; signal?: AbortSignal }): Promise<{ id: string }> };
  const accountOf: (request: IncomingMessage) => string | undefined;
  const checkout: (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>;
  const ping: (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>;
  type AgentTask = { user: string; prompt: string };
  const callTheModel: (task: AgentTask, options: { signal: AbortSignal }) => Promise<string>;
  const NAMESPACE: string;
  const handleTask: (task: ClaimedTask) => Promise<void>;
}
export {};
`;
