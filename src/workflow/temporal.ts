/**
 * Helpers for Temporal activities. idem never imports the Temporal SDK: these functions take the
 * structural subset of `Context.current()` (from `@temporalio/activity`) they read.
 *
 * The key of an activity is derived from the workflow id and the activity id, never from the run
 * id: a workflow retry (or reset) starts a new run with a new run id, replays the same history,
 * and schedules the same activities with the same activity ids; the downstream must see the same
 * key then, or a retried workflow charges twice.
 */
import { InvalidArgumentError, type OperationScope } from '../core/errors.js';
import { deriveKey } from '../core/keys.js';
import type { Transaction } from '../core/sql.js';
import { withIdempotencyKey } from '../core/key-context.js';
import type { Idem } from '../operations/idem.js';
import type { MultiStepOperation } from '../operations/multi-step.js';
import type { Outcome } from '../operations/outcome.js';

/** What the helpers read from a Temporal activity context (`Context.current()`). */
export interface ActivityContextLike {
  info: {
    workflowExecution: { workflowId: string; runId?: string };
    activityId: string;
    activityType: string;
    /** `info.workflowNamespace` in recent SDKs. */
    workflowNamespace?: string;
    /** The older name of the namespace field. */
    activityNamespace?: string;
    attempt?: number;
  };
  /** `Context.current().heartbeat`, used by `runActivity`'s `heartbeatMs`. */
  heartbeat?(details?: unknown): void;
}

/** Options shared by the helpers. */
export interface ActivityKeyOptions {
  /** The tenant the key is scoped to. Default: the workflow's namespace, else `default`. */
  tenant?: string;
}

/**
 * The idempotency key to send downstream from this activity: stable across activity retries,
 * worker crashes and workflow retries (new run ids), distinct per workflow id and activity id.
 * `path` names sub-calls when the activity makes several (each needs its own key).
 *
 * Continue-as-new starts a new run whose activity ids restart at "1": pass a stable, explicit
 * `activityId` in `ActivityOptions` for activities after a continue-as-new, or add a business
 * discriminator in `path`, or two different intents would share a key.
 */
export function activityKey(context: ActivityContextLike, ...path: string[]): string {
  const { info } = context;
  const workflowId = info.workflowExecution?.workflowId;
  if (!workflowId || !info.activityId) {
    throw new InvalidArgumentError(
      'activity context needs info.workflowExecution.workflowId and info.activityId',
    );
  }
  return deriveKey(
    { tenant: tenantOf(context), operation: 'temporal-activity', key: `wf:${workflowId}` },
    info.activityId,
    ...path,
  );
}

/** The idem operation scope of an activity: tenant, `temporal:<activity type>`, and the activity key. */
export function activityScope(
  context: ActivityContextLike,
  options: ActivityKeyOptions = {},
): OperationScope {
  return {
    tenant: options.tenant ?? tenantOf(context),
    operation: `temporal:${context.info.activityType}`,
    key: activityKey(context),
  };
}

/** Options of `runActivity`. */
export interface RunActivityOptions extends ActivityKeyOptions {
  /** What the activity was asked to do; a retry with other arguments is refused. Default: null. */
  request?: unknown;
  /**
   * Calls `context.heartbeat()` this often while the handler runs, so Temporal's heartbeat
   * timeout tells a live, slow activity from a dead one. Default: no heartbeats.
   */
  heartbeatMs?: number;
}

/** What the handler of `runActivity` gets. */
export interface ActivityRun {
  /** The activity's key (also the current key for the outgoing client). */
  key: string;
  /** A key for a named sub-call. */
  deriveKey(name: string): string;
}

/** What the call of `runActivityCall` gets. */
export interface ActivityCallRun extends ActivityRun {
  /**
   * Aborted when another attempt of this activity took it over while the call ran (this
   * attempt's lease was lost). Pass it to `fetch` or your client.
   */
  signal: AbortSignal;
}

/** Options of `runActivityCall`. */
export interface RunActivityCallOptions<R, Client> extends RunActivityOptions {
  /**
   * Local writes that go with the call's answer (`response`), in one short transaction that
   * commits after the call's result is recorded. Default: none.
   */
  record?(tx: Transaction<Client>, response: R): Promise<unknown>;
}

/**
 * Runs an activity that calls the outside world (a card charge) once per (workflow id, activity
 * id), with no transaction and no pooled connection held while the call runs: `idem.steps` with
 * one call (`op.call`), then `record` as a local step. The call sends the activity's key (also the
 * current key for `idem/client`); its result is recorded, so a retried activity returns it without
 * calling again, and one whose process died mid-call calls again with the same key, after the dead
 * attempt's lease lapses (`leaseMs` of `idem`; until then a retry gets the retryable
 * `InProgressError`, which Temporal retries).
 *
 * @example
 * export async function chargeCard(order: Order): Promise<Charge> {
 *   return runActivityCall(idem, Context.current(), async ({ signal }) => {
 *     const res = await assertOk(await payments.fetch('/charges', { method: 'POST', body: JSON.stringify(order), signal }));
 *     return (await res.json()) as Charge;
 *   }, {
 *     request: order,
 *     record: (tx, charge) => tx.query('INSERT INTO charges (order_id, provider_id) VALUES ($1, $2)', [order.id, charge.id]),
 *   });
 * }
 */
export async function runActivityCall<R, Client>(
  idem: Idem<Client>,
  context: ActivityContextLike,
  call: (activity: ActivityCallRun) => Promise<R>,
  options: RunActivityCallOptions<R, Client> = {},
): Promise<R> {
  const scope = activityScope(context, options);
  const deriveSub = (name: string) => activityKey(context, name);
  const stop = startHeartbeats(context, options.heartbeatMs);
  try {
    const result = await idem.steps({ ...scope, request: options.request ?? null }, async (op) => {
      // The downstream key is the activity's own (the one `activityKey` documents), not a step key.
      const response = await op.call('call', ({ signal }) =>
        withIdempotencyKey(scope.key, () => call({ key: scope.key, deriveKey: deriveSub, signal })),
      );
      if (options.record) await op.step('record', (tx) => options.record!(tx, response));
      return response;
    });
    return result.value;
  } finally {
    stop();
  }
}

/**
 * Runs an activity's body once per (workflow id, activity id) through `idem.run`: the body's
 * local writes and its result commit with the record, and a retry after a crash returns the
 * stored result, or runs again with the same downstream key if nothing was recorded. Inside,
 * the outgoing client (`idem/client`) sends the activity key without being told.
 *
 * The body runs inside one transaction, which stays open (a pooled connection, row locks) while
 * it runs: use it for activities whose work is local or whose calls are quick. An activity that
 * calls a slow downstream belongs in `runActivityCall`, which holds nothing while it calls.
 *
 * @example
 * // activities.ts
 * export async function chargeCard(order: Order): Promise<Charge> {
 *   return runActivity(idem, Context.current(), async (tx, { key }) => {
 *     const res = await assertOk(await payments.fetch('/charges', { method: 'POST', body: JSON.stringify(order) }));
 *     const charge = await res.json();
 *     await tx.query('INSERT INTO charges (order_id, provider_id) VALUES ($1, $2)', [order.id, charge.id]);
 *     return charge;
 *   }, { request: order });
 * }
 */
export async function runActivity<T, Client>(
  idem: Idem<Client>,
  context: ActivityContextLike,
  handler: (tx: Transaction<Client>, activity: ActivityRun) => Promise<T | Outcome<T>>,
  options: RunActivityOptions = {},
): Promise<T> {
  const scope = activityScope(context, options);
  const activity: ActivityRun = { key: scope.key, deriveKey: (name) => activityKey(context, name) };
  const stop = startHeartbeats(context, options.heartbeatMs);
  try {
    const result = await idem.run({ ...scope, request: options.request ?? null }, (tx) =>
      withIdempotencyKey(scope.key, () => handler(tx, activity)),
    );
    return result.value;
  } finally {
    stop();
  }
}

/**
 * Like `runActivityCall` for an activity with several steps: `idem.steps` records each step's
 * result, so a retried activity skips the finished steps and reruns the interrupted one with the
 * same key. Call out with `op.call` (no transaction held), write locally with `op.step`. Inside a
 * step or call, the current key for the outgoing client is that step's key.
 */
export async function runActivitySteps<T, Client>(
  idem: Idem<Client>,
  context: ActivityContextLike,
  body: (op: MultiStepOperation<Client>) => Promise<T | Outcome<T>>,
  options: RunActivityOptions = {},
): Promise<T> {
  const scope = activityScope(context, options);
  const stop = startHeartbeats(context, options.heartbeatMs);
  try {
    const result = await idem.steps({ ...scope, request: options.request ?? null }, (op) =>
      body(withStepKeys(op)),
    );
    return result.value;
  } finally {
    stop();
  }
}

/** The same operation, with each step's key made current for the outgoing client. */
function withStepKeys<Client>(op: MultiStepOperation<Client>): MultiStepOperation<Client> {
  return {
    get scope() {
      return op.scope;
    },
    get fence() {
      return op.fence;
    },
    get resumed() {
      return op.resumed;
    },
    step: (name, fn) => op.step(name, (tx, step) => withIdempotencyKey(step.key, () => fn(tx, step))),
    call: (name, fn) => op.call(name, (call) => withIdempotencyKey(call.key, () => fn(call))),
    deriveKey: (name) => op.deriveKey(name),
    heartbeat: () => op.heartbeat(),
  };
}

function tenantOf(context: ActivityContextLike): string {
  return context.info.workflowNamespace ?? context.info.activityNamespace ?? 'default';
}

function startHeartbeats(context: ActivityContextLike, everyMs: number | undefined): () => void {
  if (!everyMs || !context.heartbeat) return () => undefined;
  const timer = setInterval(() => context.heartbeat?.(), everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
