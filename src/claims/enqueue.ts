/**
 * Enqueueing: a task once per (tenant, queue, dedupe key), in the caller's transaction or its own
 * statement. The same key returns the existing task; the same key with another payload is refused.
 */
import { ConcurrentChangeError, KeyReusedError } from '../core/errors.js';
import { currentCausation } from '../core/causation.js';
import { fingerprint } from '../core/fingerprint.js';
import { validateKey, validateName } from '../core/keys.js';
import type { Queryable } from '../core/sql.js';
import { positiveInteger } from '../core/validate.js';
import type { ClaimsContext } from './context.js';
import type { EnqueueResult, EnqueueSpec } from './options.js';
import type { KeyedTaskRow, NewTask } from './statements.js';
import { decodeTask, oneTenant, taskScope } from './task.js';

/** Validates a spec and returns the task to insert (its payload as JSON text, and its fingerprint). */
function newTask(claims: ClaimsContext, spec: EnqueueSpec<unknown>, now: number): NewTask {
  validateName('tenant', spec.tenant);
  validateName('queue', spec.queue);
  validateKey(spec.key);
  return {
    tenant: spec.tenant,
    queue: spec.queue,
    key: spec.key,
    payload: JSON.stringify(spec.payload ?? null),
    fingerprint: fingerprint(spec.payload ?? null),
    visibleAt: new Date(spec.runAt ?? now),
    maxAttempts: positiveInteger('maxAttempts', spec.maxAttempts ?? claims.maxAttempts),
    // The intent and trace it is enqueued in: its handler later runs on their behalf.
    ...currentCausation(),
  };
}

/** The task of `row` for `task`'s key, or `KeyReusedError` when the key holds another payload. */
function sameTask<P>(task: NewTask, row: KeyedTaskRow, created: boolean): EnqueueResult<P> {
  if (row.fingerprint !== task.fingerprint) {
    throw new KeyReusedError(taskScope(task), row.fingerprint, task.fingerprint);
  }
  return { task: decodeTask<P>(row), created };
}

/** `Claims.enqueueIn`: one task, on `db` (the caller's transaction, or the pool). */
export async function enqueueTask<P>(
  db: Queryable,
  claims: ClaimsContext,
  spec: EnqueueSpec<P>,
): Promise<EnqueueResult<P>> {
  const now = claims.clock.now();
  const task = newTask(claims, spec, now);
  // Bounded: the loop only repeats if the conflicting task was swept between the statements.
  for (let attempt = 0; attempt < 3; attempt++) {
    const inserted = await claims.statements.enqueue(db, { ...task, now: new Date(now) });
    if (inserted) return { task: decodeTask<P>(inserted), created: true };
    const existing = await claims.statements.existing(db, task);
    if (existing) return sameTask(task, existing, false);
  }
  throw new ConcurrentChangeError('enqueue: the task kept disappearing between insert and read');
}

/**
 * `Claims.enqueueManyIn`: many tasks in one round trip (plus one read when some keys already
 * exist), results in the order of `specs`; a key repeated inside `specs` yields one task.
 */
export async function enqueueTasks<P>(
  db: Queryable,
  claims: ClaimsContext,
  specs: readonly EnqueueSpec<P>[],
): Promise<EnqueueResult<P>[]> {
  if (specs.length === 0) return [];
  const now = claims.clock.now();
  const tasks = specs.map((spec) => newTask(claims, spec, now));
  const tenant = oneTenant(specs.map((spec) => spec.tenant));
  const inserted = await claims.statements.enqueueMany(db, { tasks, now: new Date(now) });
  const identity = (tenant: unknown, queue: unknown, key: unknown) => JSON.stringify([tenant, queue, key]);
  const created = new Map(inserted.map((r) => [identity(r.tenant_id, r.queue, r.dedupe_key), r]));
  const missing = tasks.filter((t) => !created.has(identity(t.tenant, t.queue, t.key)));
  const existing = new Map<string, KeyedTaskRow>();
  if (missing.length > 0) {
    // Tasks of one tenant (the usual batch) are read by a statement pinned to it.
    const rows =
      tenant === null
        ? await claims.statements.existingMany(db, { keys: missing })
        : await claims.statements.existingManyTenant(db, { tenant, keys: missing });
    for (const r of rows) existing.set(identity(r.tenant_id, r.queue, r.dedupe_key), r);
  }
  const handedOut = new Set<string>();
  return tasks.map((task) => {
    const id = identity(task.tenant, task.queue, task.key);
    const row = created.get(id) ?? existing.get(id);
    if (!row)
      throw new ConcurrentChangeError(`enqueueMany: task ${task.key} vanished between insert and read`);
    const first = created.has(id) && !handedOut.has(id);
    handedOut.add(id);
    return sameTask<P>(task, row, first);
  });
}
