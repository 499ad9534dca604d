/**
 * Cells: one idem per group of tenants, each group on its own PostgreSQL. A tenant lives in exactly
 * one cell, so everything idem keeps for it (keys, events, inbox records, receipts, tasks) is on its
 * cell's server, written in the same transactions as the tenant's business rows, and a cell's
 * outage touches only its tenants. The router below picks a tenant's cell; each cell runs its own
 * dispatchers and workers against its own database, so nothing ever reads across cells.
 */
import type { Clock } from '../core/clock.js';
import type { IdemEvents } from '../core/event-channel.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { Sql } from '../core/sql.js';
import { validateTenant } from '../core/tenant.js';
import { Claims } from '../claims/claims.js';
import type { ClaimsOptions } from '../claims/options.js';
import { Inbox, type InboxOptions } from '../inbox/inbox.js';
import { migrate, type MigrateResult } from '../migrate/migrate.js';
import { Idem } from '../operations/idem.js';
import type { IdemOptions } from '../operations/options.js';
import { Outbox, type OutboxOptions } from '../outbox/outbox.js';

/** Options of `createCells`. */
export interface CellsOptions<Client = unknown> {
  /**
   * The cells by name, each an `Sql` on its own PostgreSQL (`fromPg(pool)`, …). Names are 1–100
   * characters of letters, digits, `_`, `-` and `.`, as they appear in `?cell=` and logs.
   */
  cells: Readonly<Record<string, Sql<Client>>>;
  /**
   * The cell of a tenant: the name of one of `cells`. Called on every routing, so keep it fast and
   * stable (a directory lookup, a hash of the tenant). A tenant's cell must not change while idem
   * holds rows for it there: moving a tenant is a migration of its rows, not a change here.
   * Returning an unknown name throws `InvalidArgumentError` (nothing is written anywhere).
   */
  cellOf: (tenant: string) => string;
  /** Schema of idem's tables in every cell. Default `idem`. */
  schema?: string;
  /** Time source for every handle. Default: the system clock. */
  clock?: Clock;
  /**
   * Where every handle reports (`createEvents()`), as each module's `events` option: one channel
   * for every cell. Default: none, and a survived failure is written to stderr, one line.
   */
  events?: IdemEvents;
  /** Options of each cell's `Idem` (keyed operations), as `createIdem` takes them. */
  idem?: Omit<IdemOptions<Client>, 'sql' | 'schema' | 'clock' | 'events'>;
  /** Options of each outbox handle, as `createOutbox` takes them. */
  outbox?: Omit<OutboxOptions, 'sql' | 'schema' | 'clock' | 'events' | 'tenant'>;
  /** Options of each inbox handle, as `createInbox` takes them. */
  inbox?: Omit<InboxOptions<Client>, 'sql' | 'schema' | 'clock' | 'events' | 'tenant'>;
  /** Options of each cell's `Claims`, as `createClaims` takes them. */
  claims?: Omit<ClaimsOptions<Client>, 'sql' | 'schema' | 'clock' | 'events'>;
}

/** One cell: its database and the handles on it. */
export interface Cell<Client = unknown> {
  readonly name: string;
  /** The cell's database: give it to the cell's dispatcher, processor, sender and workers. */
  readonly sql: Sql<Client>;
  /** Keyed operations on this cell (every call names its tenant). */
  readonly idem: Idem<Client>;
  /** Claims on this cell (every enqueue names its tenant). */
  readonly claims: Claims<Client>;
  /** The cell's outbox for tools (stats, redrive, cleanup); add events through `forTenant`. */
  readonly outbox: Outbox;
}

/** Where a tenant lives, with handles bound to it. */
export interface TenantCell<Client = unknown> {
  readonly tenant: string;
  /** The tenant's cell. */
  readonly cell: Cell<Client>;
  /** The cell's database: open the tenant's business transactions here. */
  readonly sql: Sql<Client>;
  /** The cell's keyed operations: name this tenant in every call (`tenant: route.tenant`). */
  readonly idem: Idem<Client>;
  /** The cell's claims: name this tenant in every enqueue. */
  readonly claims: Claims<Client>;
  /** An outbox whose events belong to this tenant unless they name another. */
  readonly outbox: Outbox;
  /** An inbox whose messages belong to this tenant unless they name another. */
  readonly inbox: Inbox<Client>;
}

const cellName = /^[A-Za-z0-9_.-]{1,100}$/;

/**
 * Routes tenants to cells.
 *
 * @example
 * const cells = createCells({
 *   cells: { eu: fromPg(euPool), us: fromPg(usPool) },
 *   cellOf: (tenant) => directory.get(tenant) ?? 'eu',
 * });
 * await cells.migrate();
 * // A request: everything in the tenant's cell, in one transaction there.
 * const { sql, idem, outbox } = cells.forTenant(tenant);
 * await idem.run({ tenant, operation: 'pay', key, request }, async (tx) => {
 *   await outbox.add(tx, { topic: 'payments', key: paymentId, type: 'payment.created', payload });
 * });
 * // Workers: one set per cell, each on its own database.
 * const dispatchers = cells.map((cell) => createOutboxDispatcher({ sql: cell.sql, publisher }));
 */
export class Cells<Client = unknown> {
  /** The cell names, in the order given. */
  readonly names: readonly string[];
  /** The cells' databases by name: the console's `cells` option. */
  readonly sqls: Readonly<Record<string, Sql<Client>>>;
  private readonly cells = new Map<string, Cell<Client>>();
  private readonly routes = new Map<string, TenantCell<Client>>();
  private readonly cellOfTenant: (tenant: string) => string;
  private readonly options: CellsOptions<Client>;

  constructor(options: CellsOptions<Client>) {
    this.options = options;
    this.cellOfTenant = options.cellOf;
    if (typeof options.cellOf !== 'function') throw new InvalidArgumentError('cellOf must be a function');
    const entries = Object.entries(options.cells ?? {});
    if (entries.length === 0) throw new InvalidArgumentError('createCells needs at least one cell');
    for (const [name, sql] of entries) {
      if (!cellName.test(name)) {
        throw new InvalidArgumentError(
          `cell name ${JSON.stringify(name)} must be 1–100 of A–Z a–z 0–9 _ . -`,
        );
      }
      const common = { sql, schema: options.schema, clock: options.clock, events: options.events };
      this.cells.set(name, {
        name,
        sql,
        idem: new Idem({ ...options.idem, ...common }),
        claims: new Claims({ ...options.claims, ...common }),
        outbox: new Outbox({ ...options.outbox, ...common }),
      });
    }
    this.names = entries.map(([name]) => name);
    this.sqls = Object.fromEntries(entries);
  }

  /** The cell called `name`; throws `InvalidArgumentError` for an unknown one. */
  cell(name: string): Cell<Client> {
    const cell = this.cells.get(name);
    if (!cell) throw new InvalidArgumentError(`no cell ${JSON.stringify(name)}`);
    return cell;
  }

  /** The name of a tenant's cell (what `cellOf` says, checked). */
  cellOf(tenant: string): string {
    validateTenant(tenant);
    const name = this.cellOfTenant(tenant);
    if (typeof name !== 'string' || !this.cells.has(name)) {
      throw new InvalidArgumentError(`cellOf(${JSON.stringify(tenant)}) named no cell: ${String(name)}`);
    }
    return name;
  }

  /**
   * A tenant's cell and handles bound to the tenant. Handles are made once per tenant and kept
   * (they hold no connection, only rendered statements).
   */
  forTenant(tenant: string): TenantCell<Client> {
    const name = this.cellOf(tenant);
    const known = this.routes.get(tenant);
    if (known && known.cell.name === name) return known;
    const cell = this.cells.get(name)!;
    const common = {
      sql: cell.sql,
      schema: this.options.schema,
      clock: this.options.clock,
      events: this.options.events,
      tenant,
    };
    const route: TenantCell<Client> = {
      tenant,
      cell,
      sql: cell.sql,
      idem: cell.idem,
      claims: cell.claims,
      outbox: new Outbox({ ...this.options.outbox, ...common }),
      inbox: new Inbox({ ...this.options.inbox, ...common }),
    };
    this.routes.set(tenant, route);
    return route;
  }

  /** `fn` for every cell, by cell name: start a dispatcher or worker per cell with it. */
  map<T>(fn: (cell: Cell<Client>) => T): Record<string, T> {
    return Object.fromEntries(this.names.map((name) => [name, fn(this.cells.get(name)!)]));
  }

  /** Applies idem's migrations in every cell (each under its own advisory lock). */
  async migrate(): Promise<Record<string, MigrateResult>> {
    const results: Record<string, MigrateResult> = {};
    for (const name of this.names) {
      results[name] = await migrate(this.cells.get(name)!.sql, { schema: this.options.schema });
    }
    return results;
  }
}

/**
 * Creates a router from tenants to cells. See `CellsOptions`.
 *
 * @example
 * const cells = createCells({ cells: { eu: fromPg(euPool), us: fromPg(usPool) }, cellOf: (tenant) => home(tenant) });
 * const { idem } = cells.forTenant('acme');
 */
export function createCells<Client>(options: CellsOptions<Client>): Cells<Client> {
  return new Cells(options);
}
