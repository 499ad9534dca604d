/**
 * A transactional adapter for @nestjs-cls/transactional (`ClsPluginTransactional`) whose
 * transactions are idem's: inside an `@Idempotent()` handler, `txHost.tx` is the transaction the
 * key was claimed in, so repositories written against the `TransactionHost` (and the
 * `@Transactional()` methods they call, which join it) commit with the key and the stored response.
 * Elsewhere it opens a transaction through idem's `Sql` for your ORM, like the ORM's own adapter.
 *
 * @example
 * ClsModule.forRoot({
 *   global: true,
 *   middleware: { mount: true },
 *   plugins: [
 *     new ClsPluginTransactional({
 *       imports: [PrismaModule],
 *       adapter: new TransactionalAdapterIdem({ connectionToken: PrismaService, sql: (prisma) => fromPrisma(prisma) }),
 *     }),
 *   ],
 * }),
 * IdemModule.forRootAsync({
 *   inject: [PrismaService, TransactionHost],
 *   useFactory: (prisma: PrismaService, txHost: TransactionHost) => ({
 *     idem: createIdem({ sql: fromPrisma(prisma) }),
 *     tenant: (req) => req.headers['x-tenant'],
 *     transactionHost: txHost,
 *   }),
 * }),
 *
 * Only types are shared with @nestjs-cls/transactional: this file loads nothing from it, so
 * idem/nestjs works without it installed.
 */
import type { Sql, Transaction } from '../core/sql.js';

/**
 * Option key (a symbol, so it never meets an option of yours) carrying the transaction to join.
 * `Symbol.for`, so the interceptor and the adapter agree when they come from two copies of idem
 * (its CommonJS and its ESM build).
 */
export const joinIdemTransaction: unique symbol = Symbol.for('idem.nestjs.join-transaction');

/** Options of a transaction opened through `TransactionHost.withTransaction(options, fn)`. */
export interface IdemTransactionOptions {
  /**
   * Set by `@Idempotent()` (never by you): join this transaction instead of opening one, so a
   * `@Transactional()` method inside an idempotent route writes in idem's transaction.
   */
  [joinIdemTransaction]?: Transaction;
}

export interface TransactionalAdapterIdemOptions<Connection, Client> {
  /** The provider of your ORM's client: a `PrismaService`, TypeORM's `DataSource`, a Knex token… */
  connectionToken: unknown;
  /** idem's `Sql` for that client, e.g. `(prisma) => fromPrisma(prisma)`. */
  sql: (connection: Connection) => Sql<Client>;
}

/** What @nestjs-cls/transactional's `optionsFactory` returns (`TransactionalAdapterOptions`). */
export interface IdemTransactionalAdapterOptions<Connection, Client> {
  wrapWithTransaction(
    options: IdemTransactionOptions | undefined,
    fn: (...args: unknown[]) => Promise<unknown>,
    setTx: (client?: Client | Connection) => void,
  ): Promise<unknown>;
  getFallbackInstance(): Client | Connection;
}

/**
 * `txHost.tx` is your ORM's transaction object (`Client`, e.g. `Prisma.TransactionClient`) inside
 * a transaction and the ORM's root client (`Connection`) outside one.
 */
export class TransactionalAdapterIdem<Connection, Client> {
  readonly connectionToken: unknown;

  constructor(private readonly options: TransactionalAdapterIdemOptions<Connection, Client>) {
    this.connectionToken = options.connectionToken;
  }

  optionsFactory = (connection: Connection): IdemTransactionalAdapterOptions<Connection, Client> => {
    const sql = this.options.sql(connection);
    return {
      async wrapWithTransaction(options, fn, setTx) {
        const joined = options?.[joinIdemTransaction] as Transaction<Client> | undefined;
        if (joined) {
          setTx(joined.client);
          return fn();
        }
        return sql.transaction(async (tx) => {
          setTx(tx.client);
          return fn();
        });
      },
      getFallbackInstance: () => connection,
    };
  };
}
