/**
 * The operator's side of the claims: read a task, list and redrive dead letters, and sweep
 * finished tasks past their retention.
 */
import { sweepInBatches, type SweepOptions, type SweepResult } from '../core/sweeper.js';
import { validateTenant } from '../core/tenant.js';
import type { ClaimsContext } from './context.js';
import { decodeTask, type TaskRecord } from './task.js';

/** How `Claims.get` names a task: by id (with its tenant for a primary-key lookup), or by its key. */
export type TaskRef = { id: string; tenant?: string } | { tenant: string; queue: string; key: string };

/** `Claims.get`. */
export async function readTask<P>(claims: ClaimsContext, ref: TaskRef): Promise<TaskRecord<P> | null> {
  if (ref.tenant !== undefined) validateTenant(ref.tenant);
  const { statements, sql } = claims;
  const row =
    'id' in ref
      ? ref.tenant === undefined
        ? await statements.byId(sql, { id: ref.id })
        : await statements.byIdTenant(sql, { id: ref.id, tenant: ref.tenant })
      : await statements.byKey(sql, ref);
  return row ? decodeTask<P>(row) : null;
}

/** `Claims.listDead`. */
export async function listDeadTasks<P>(
  claims: ClaimsContext,
  options: { queue: string; limit?: number; tenant?: string },
): Promise<TaskRecord<P>[]> {
  if (options.tenant !== undefined) validateTenant(options.tenant);
  const rows = await claims.statements.dead(claims.sql, {
    queue: options.queue,
    limit: options.limit ?? 100,
    tenant: options.tenant ?? null,
  });
  return rows.map((row) => decodeTask<P>(row));
}

/** `Claims.redrive`. */
export async function redriveTask<P>(
  claims: ClaimsContext,
  id: string,
  options: { runAt?: number; tenant?: string },
): Promise<TaskRecord<P> | null> {
  if (options.tenant !== undefined) validateTenant(options.tenant);
  const visibleAt = new Date(options.runAt ?? claims.clock.now());
  const row =
    options.tenant === undefined
      ? await claims.statements.redrive(claims.sql, { id, visibleAt })
      : await claims.statements.redriveTenant(claims.sql, { id, visibleAt, tenant: options.tenant });
  return row ? decodeTask<P>(row) : null;
}

/** `Claims.sweep`: finished tasks past their retention, with their dedupe keys. */
export function sweepTasks(claims: ClaimsContext, options: SweepOptions): Promise<SweepResult> {
  const { statements, clock } = claims;
  return sweepInBatches(
    claims.sql,
    clock,
    [
      {
        statement: statements.sweep,
        tenantStatement: statements.sweepTenant,
        cutoff: () => new Date(clock.now()),
      },
    ],
    options,
  );
}
