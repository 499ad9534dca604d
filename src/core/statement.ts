/**
 * One SQL statement as a typed function: its text, its prepared-statement name and the order of
 * its parameters live together, and a caller passes named fields instead of a positional array.
 * graphile-worker keeps its statements the same way (one function per statement in `src/sql`).
 *
 * ```ts
 * const readTask = defineStatement({
 *   text: `SELECT * FROM tasks WHERE tenant_id = $1 AND id = $2`,
 *   name: preparedName('claims', 'byId', text),          // or leave it out: sent unprepared
 *   params: (task: { tenant: string; id: string }) => [task.tenant, task.id],
 *   result: firstRow<TaskRow>,
 * });
 * const row = await readTask(db, { tenant, id });
 * ```
 *
 * The wrapper costs one closure call and the parameter array the caller used to build itself:
 * nothing a round trip would show.
 */
import { createHash } from 'node:crypto';
import type { PipelinedTransaction, Queryable, QueryResult, Row } from './sql.js';
import { queryAndCommit } from './sql.js';
import { promised } from './promised.js';
import { validateTenant } from './tenant.js';

/** What `defineStatement` takes. */
export interface StatementSpec<Input, R extends Row, Output> {
  /** The statement's text, with `$1`-style parameters. */
  readonly text: string;
  /**
   * The prepared-statement name (see `preparedName`). Without one the text is sent unnamed, as a
   * statement that runs rarely should be (a named one would stay prepared on every connection).
   */
  readonly name?: string | undefined;
  /** The parameters `$1, $2, …` in order, from the statement's input. */
  readonly params: (input: Input) => readonly unknown[];
  /** What a caller gets back, from the driver's result. */
  readonly result: (result: QueryResult<R>) => Output;
}

/** A statement as a function of a connection (or transaction) and its input. */
export interface Statement<Input, Output> {
  (db: Queryable, input: Input): Promise<Output>;
  /** The statement's text. */
  readonly text: string;
  /** Its prepared-statement name, or `undefined` when it is sent unnamed. */
  readonly name: string | undefined;
  /** Its parameters in order, from `input`. */
  params(input: Input): readonly unknown[];
  /**
   * Sends it as the transaction's last statement together with COMMIT, in one round trip (see
   * `queryAndCommit` in core/sql.ts); the transaction is over afterwards, whatever happens.
   */
  withCommit(tx: PipelinedTransaction, input: Input): Promise<Output>;
}

/** Makes a typed statement function from its text, name, parameter order and result shape. */
export function defineStatement<Input, R extends Row, Output>(
  spec: StatementSpec<Input, R, Output>,
): Statement<Input, Output> {
  const { text, params, result } = spec;
  const options = spec.name === undefined ? undefined : { name: spec.name };
  // A promise callback rather than an async function: one promise fewer per statement, on every
  // replay's read among others (see observability/events.ts, `observe`). A throw while building
  // the parameters still rejects.
  const run = (db: Queryable, input: Input): Promise<Output> =>
    promised(() => db.query<R>(text, params(input), options)).then(result);
  const statement = Object.assign(run, {
    text,
    params,
    withCommit: async (tx: PipelinedTransaction, input: Input): Promise<Output> =>
      result((await tx[queryAndCommit](text, params(input), options)) as QueryResult<R>),
  });
  // A function's own `name` is read-only, so assigning it throws: it is defined instead.
  return Object.defineProperty(statement, 'name', { value: spec.name, enumerable: true });
}

/**
 * The prepared-statement name of one statement text: `idem_<prefix>_<key>_<hash of the text>`,
 * so two schemas (or two versions of a statement) on one connection never collide, and
 * node-postgres parses and plans each once per connection.
 */
export function preparedName(prefix: string, key: string, text: string): string {
  const stem = prefix === '' ? 'idem' : `idem_${prefix}`;
  return `${stem}_${key}_${createHash('sha1').update(text).digest('hex').slice(0, 12)}`;
}

/**
 * A statement sent named, prepared once per connection (the hot path's), as
 * `idem_<prefix>_<key>_<hash of its text>`; the others are sent unnamed (`defineStatement`).
 */
export function preparedStatement<Input, R extends Row, Output>(
  prefix: string,
  key: string,
  spec: Omit<StatementSpec<Input, R, Output>, 'name'>,
): Statement<Input, Output> {
  return defineStatement({ ...spec, name: preparedName(prefix, key, spec.text) });
}

/** Result shape: every row. */
export function allRows<R extends Row>(result: QueryResult<R>): R[] {
  return result.rows;
}

/** Result shape: the first row, or `null` when there is none. */
export function firstRow<R extends Row>(result: QueryResult<R>): R | null {
  return result.rows[0] ?? null;
}

/** Result shape: how many rows the statement touched. */
export function affectedRows(result: QueryResult): number {
  return result.rowCount;
}

/** Result shape: nothing (the statement is run for its effect). */
export function nothing(): void {}

/** Pinned to one tenant: every row of the statement is `tenant`'s. */
export interface Pinned {
  tenant: string;
}

/** What `tenantForms` takes: one statement's text in both forms, its parameters and result. */
export interface TenantFormsSpec<Input, R extends Row, Output> {
  /** The statement's text across every tenant (`null`), or pinned to the tenant parameter given. */
  readonly text: (pin: string | null) => string;
  /** The pinned form's tenant parameter: the one after the across form's (`$4` after three). */
  readonly pin: string;
  /** The across form's parameters; the pinned form's are these and then the tenant. */
  readonly params: (input: Input) => readonly unknown[];
  readonly result: (result: QueryResult<R>) => Output;
  /**
   * Sends both forms named, `preparedStatement(prepared, key)` and `(prepared, key + 'Tenant')`;
   * without it both are sent unnamed.
   */
  readonly prepared?: string;
}

/** A statement `Key` of every tenant's rows, and `KeyTenant`, its form pinned to one tenant. */
export type TenantForms<Key extends string, Input, Output> = {
  [K in Key]: Statement<Input, Output>;
} & {
  [K in `${Key}Tenant`]: Statement<Input & Pinned, Output>;
};

/**
 * A statement of every tenant's rows and its form pinned to one tenant (`…Tenant`, the tenant its
 * last parameter), defined at once, to spread into a module's statements: the two forms that a
 * worker scoped to tenants and `acrossOrPinned` choose between.
 */
export function tenantForms<Key extends string, Input, R extends Row, Output>(
  key: Key,
  spec: TenantFormsSpec<Input, R, Output>,
): TenantForms<Key, Input, Output> {
  const { text, pin, params, result, prepared } = spec;
  const define = <I>(name: string, form: Omit<StatementSpec<I, R, Output>, 'name'>) =>
    prepared === undefined ? defineStatement(form) : preparedStatement(prepared, name, form);
  const across = define(key, { text: text(null), params, result });
  const pinned = define(`${key}Tenant`, {
    text: text(pin),
    params: (input: Input & Pinned) => [...params(input), input.tenant],
    result,
  });
  return { [key]: across, [`${key}Tenant`]: pinned } as TenantForms<Key, Input, Output>;
}

/**
 * Runs a statement of every tenant's rows, or its form pinned to one tenant (`…Tenant`, `$n` the
 * tenant) when `tenant` is given, after checking it: the choice every operator tool with an
 * optional tenant makes.
 */
export function acrossOrPinned<Input, Output>(
  db: Queryable,
  forms: { across: Statement<Input, Output>; pinned: Statement<Input & Pinned, Output> },
  input: Input,
  tenant: string | undefined,
): Promise<Output> {
  if (tenant === undefined) return forms.across(db, input);
  validateTenant(tenant);
  return forms.pinned(db, { ...input, tenant });
}
