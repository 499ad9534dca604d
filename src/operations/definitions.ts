/**
 * Defined operations: a multi-step operation registered by name with its code (`idem.define`), as
 * DBOS registers workflows, so that after a crash, a deploy or a client that gave up, a completer
 * (`createCompleter`) can find the code by the operation's name and drive the intent to its end
 * with the same derived keys, instead of waiting for a client's retry that may never come.
 */
import { InvalidArgumentError, type OperationScope } from '../core/errors.js';
import type { MultiStepOperation } from './multi-step.js';
import type { GiveUpAction, RetentionPolicy } from './options.js';
import type { OperationResult, Outcome } from './outcome.js';

/** The body of a defined operation: the same as `idem.steps`' body, with its input. */
export type DefinedBody<I, T, Client> = (op: MultiStepOperation<Client>, input: I) => Promise<T | Outcome<T>>;

export type { GiveUpAction } from './options.js';

/** Options of `idem.define`. */
export interface DefineOptions<I, T, Client = unknown> {
  /**
   * Undoes what the operation did, for one that cannot complete (a provider that keeps refusing,
   * say), when an operator or the `giveUp` policy asks for it: runs with the same `op` (its
   * recorded steps are there; give its own steps and calls new names, such as `refund`), after the
   * steps the operation recorded. Its outcome is stored as the operation's result, like the
   * body's: return `refused(…)` for a business refusal that every retry then gets. `failure` is the
   * completer's last error, or null. Default: none (an operator can then only `fail` it).
   */
  compensate?: (op: MultiStepOperation<Client>, input: I, failure: string | null) => Promise<T | Outcome<T>>;
  /**
   * When the completer stops resuming on its own: after `afterAttempts` resumes that failed with a
   * transient error, it runs `action` (`'compensate'` needs `compensate`). Default: never; the
   * completer keeps resuming with backoff, and the intent stays visible (the console, `idem
   * intents`, the `idem_intents_waiting` metric) until it completes or an operator decides.
   */
  giveUp?: { afterAttempts: number; action: GiveUpAction };
  /** Retention of this operation's results. Default: the `Idem` instance's. */
  retention?: Partial<RetentionPolicy>;
  /** How long a concurrent duplicate waits for a running execution. Default: the `Idem` instance's. */
  waitMs?: number;
}

/** One run of a defined operation. */
export interface DefinedSpec<I> {
  tenant: string;
  /** The intent's idempotency key. */
  key: string;
  /**
   * The body's input. It is the request that is fingerprinted (the same key with another input
   * is `KeyReusedError`), and it is kept while the operation is pending, with its types (`Date`,
   * `bigint`, bytes, `Map`, …, as step results), so that a completer can run the body again.
   */
  input: I;
  /** Overrides the definition's `waitMs`. */
  waitMs?: number;
  /** Overrides the definition's `retention`. */
  retention?: Partial<RetentionPolicy>;
}

/** What a defined operation's handle needs from the `Idem` that made it. */
export interface DefinitionHost<Client> {
  runDefined<I, T>(
    definition: OperationDefinition<I, T, Client>,
    spec: DefinedSpec<I>,
  ): Promise<OperationResult<T>>;
}

/**
 * A multi-step operation registered by name, made by `idem.define`. Its members are methods, so
 * a definition for a driver's client type is usable wherever one for `unknown` is.
 */
export interface OperationDefinition<I, T, Client = unknown> {
  /** The operation's name: the `operation` of its keys, and how a completer finds its code. */
  readonly name: string;
  /** The give-up policy (`DefineOptions.giveUp`), if any. */
  readonly giveUp: { afterAttempts: number; action: GiveUpAction } | undefined;
  /** Whether `compensate` was given. */
  readonly compensates: boolean;
  /** Retention of this operation's results, over the `Idem` instance's. */
  readonly retention: Partial<RetentionPolicy> | undefined;
  /** `DefineOptions.waitMs`. */
  readonly waitMs: number | undefined;
  /**
   * Runs the operation once per intent (`spec.key`), like `idem.steps`, keeping its input until
   * it ends. A retry of the key resumes or replays it; a completer finishes it when nobody retries.
   *
   * @example
   * const { value } = await createPayment.run({ tenant: 'acme', key: 'order-1001', input: { amount: 1250 } });
   */
  run(spec: DefinedSpec<I>): Promise<OperationResult<T>>;
  /** The body, as given to `define`. */
  body(op: MultiStepOperation<Client>, input: I): Promise<T | Outcome<T>>;
  /** The compensation, as given to `define`; throws when there is none. */
  compensate(op: MultiStepOperation<Client>, input: I, failure: string | null): Promise<T | Outcome<T>>;
  /** The scope of one intent of this operation. */
  scope(tenant: string, key: string): OperationScope;
}

/** Makes the handle `idem.define` returns. */
export function makeDefinition<I, T, Client>(
  name: string,
  body: DefinedBody<I, T, Client>,
  options: DefineOptions<I, T, Client>,
  host: DefinitionHost<Client>,
): OperationDefinition<I, T, Client> {
  const definition: OperationDefinition<I, T, Client> = {
    name,
    giveUp: options.giveUp,
    compensates: options.compensate !== undefined,
    retention: options.retention,
    waitMs: options.waitMs,
    run: (spec) => host.runDefined(definition, spec),
    body: (op, input) => body(op, input),
    compensate: (op, input, failure) => {
      if (!options.compensate) {
        return Promise.reject(new InvalidArgumentError(`operation "${name}" has no compensate function`));
      }
      return options.compensate(op, input, failure);
    },
    scope: (tenant, key) => ({ tenant, operation: name, key }),
  };
  return definition;
}
