import { InvalidArgumentError, type OperationScope, type ResourcePointer } from '../core/errors.js';
import type { QueryResult, Row, Transaction } from '../core/sql.js';
import type { OperationContext } from '../operations/idem.js';
import type { CallContext, KeptInput, MultiStepOperation } from '../operations/multi-step.js';
import type { OperationDefinition } from '../operations/definitions.js';
import { toOutcome } from '../operations/outcome.js';
import { encodeResult } from '../steps/result-codec.js';
import { answerResponse } from './answer.js';
import type { CapturedResponse } from './captured-response.js';
import type { StoredResponseMeta } from './stored-response.js';

/**
 * What a handler behind the idempotency integration gets, as `req.idem` (Express, node:http),
 * `request.idem` (Fastify) or `c.get('idem')` (Hono).
 */
export interface IdempotencyContext<Client = unknown> {
  /** The request's idempotency key. */
  readonly key: string;
  readonly tenant: string;
  readonly operation: string;
  readonly scope: OperationScope;
  readonly mode: 'transaction' | 'steps';
  /**
   * Transaction mode: the transaction the key was claimed in. Write business rows through it
   * (`tx.query(...)`, or your driver's object `tx.client`); they commit together with the key and
   * the stored response, before the response is sent. Refused after the response is sent, and in
   * steps mode.
   */
  readonly tx: Transaction<Client>;
  /**
   * Steps mode: a local step. Runs `fn` once per intent in one short transaction and records its
   * result under `name` (the recovery point). A retry after a failure or crash skips recorded
   * steps. Keep `fn` to database work: a call to the outside world goes in `call`.
   */
  step<R>(name: string, fn: (tx: Transaction<Client>, step: { key: string }) => Promise<R>): Promise<R>;
  /**
   * Steps mode: a call to the outside world, run once per intent with no transaction and no pooled
   * connection held while it runs. `key` is its derived key (the same on every retry); `signal`
   * aborts if a retry took the request over meanwhile. Its JSON result is recorded under `name`;
   * a retry after a crash mid-call calls again with the same key.
   */
  call<R>(name: string, fn: (call: CallContext) => Promise<R>): Promise<R>;
  /** Steps mode: renews the lease by hand (calls renew it on their own). */
  heartbeat(): Promise<void>;
  /**
   * Steps mode: runs the defined operation `definition` (`idem.define`, named as this route's
   * operation) as this request, with `input`, and resolves with the response its body answered
   * (`httpAnswer(…)`): send it. Its input is kept while it is pending, so a completer finishes it
   * if this process dies or the client gives up; the client's retry then gets the response the
   * completer stored.
   *
   * @example
   * app.post('/v1/payments', { config: { idempotency: { mode: 'steps', operation: 'create-payment' } } }, async (request, reply) => {
   *   const answer = await request.idem!.run(createPayment, { tenant: request.idem!.tenant, ...request.body });
   *   return reply.code(answer.status).headers(Object.fromEntries(answer.headers)).send(Buffer.from(answer.body));
   * });
   */
  run<I>(definition: OperationDefinition<I, StoredResponseMeta, Client>, input: I): Promise<CapturedResponse>;
  /** Steps mode: true when this request took over an execution that crashed or failed. */
  readonly resumed: boolean;
  /** A key for a downstream call, derived from this intent and `name`; stable across retries. */
  deriveKey(name: string): string;
  /** Names what this request created; the key's tombstone keeps it after the response expires. */
  setResource(resource: ResourcePointer): void;
}

/** Common state of both modes. Not exported by `idem/http`: users see `IdempotencyContext`. */
abstract class BaseContext<Client> implements IdempotencyContext<Client> {
  abstract readonly mode: 'transaction' | 'steps';
  resource: ResourcePointer | null = null;
  protected closed = false;
  /**
   * The last error a statement (transaction mode) or a step or call (steps mode) threw. When the
   * handler then answers with a response that is not stored (a 5xx), this error, not the
   * response, says whether the request failed for good or may succeed on a retry.
   */
  lastFailure: unknown = undefined;

  constructor(
    readonly scope: OperationScope,
    private readonly derive: (name: string) => string,
  ) {}

  get key(): string {
    return this.scope.key;
  }
  get tenant(): string {
    return this.scope.tenant;
  }
  get operation(): string {
    return this.scope.operation;
  }
  abstract get tx(): Transaction<Client>;
  abstract step<R>(
    name: string,
    fn: (tx: Transaction<Client>, step: { key: string }) => Promise<R>,
  ): Promise<R>;
  abstract call<R>(name: string, fn: (call: CallContext) => Promise<R>): Promise<R>;
  abstract heartbeat(): Promise<void>;
  abstract run<I>(
    definition: OperationDefinition<I, StoredResponseMeta, Client>,
    input: I,
  ): Promise<CapturedResponse>;
  abstract get resumed(): boolean;

  deriveKey(name: string): string {
    return this.derive(name);
  }
  setResource(resource: ResourcePointer): void {
    this.resource = { type: String(resource.type), id: String(resource.id) };
  }
  /** Called once the response is captured: later use of the transaction is a bug. */
  close(): void {
    this.closed = true;
  }

  protected noting<R>(running: Promise<R>): Promise<R> {
    return running.catch((error: unknown) => {
      this.lastFailure = error;
      throw error;
    });
  }
}

/** The context of `mode: 'transaction'`, built by the engine (users see `IdempotencyContext`). */
export class TransactionContext<Client> extends BaseContext<Client> {
  readonly mode = 'transaction';
  private readonly guarded: Transaction<Client>;

  constructor(tx: Transaction<Client>, operation: OperationContext) {
    super(operation.scope, (name) => operation.deriveKey(name));
    // A query after the response was captured would run after COMMIT, on a connection that is back
    // in the pool (maybe inside someone else's transaction): refuse it loudly instead.
    this.guarded = {
      client: tx.client,
      query: <R extends Row>(text: string, params?: readonly unknown[]): Promise<QueryResult<R>> => {
        if (this.closed) {
          return Promise.reject(
            new InvalidArgumentError('idem.tx used after the response was sent; write before responding'),
          );
        }
        return this.noting(tx.query<R>(text, params));
      },
    };
  }
  get tx(): Transaction<Client> {
    return this.guarded;
  }
  get resumed(): boolean {
    return false;
  }
  step(): never {
    throw new InvalidArgumentError(
      "idem.step() needs mode: 'steps'; in transaction mode write through idem.tx",
    );
  }
  call(): never {
    throw new InvalidArgumentError(
      "idem.call() needs mode: 'steps': a call to the outside world cannot run inside the request's transaction",
    );
  }
  heartbeat(): never {
    throw new InvalidArgumentError("idem.heartbeat() needs mode: 'steps'");
  }
  run(): never {
    throw new InvalidArgumentError("idem.run() of a defined operation needs mode: 'steps'");
  }
}

/** The context of `mode: 'steps'`, built by the engine (users see `IdempotencyContext`). */
export class StepsContext<Client> extends BaseContext<Client> {
  readonly mode = 'steps';

  constructor(private readonly op: MultiStepOperation<Client>) {
    super(op.scope, (name) => op.deriveKey(name));
  }
  get tx(): never {
    throw new InvalidArgumentError(
      "idem.tx is not available in mode 'steps': each idem.step(name, (tx) => ...) gets its own",
    );
  }
  get resumed(): boolean {
    return this.op.resumed;
  }
  step<R>(name: string, fn: (tx: Transaction<Client>, step: { key: string }) => Promise<R>): Promise<R> {
    if (this.closed) {
      return Promise.reject(new InvalidArgumentError('idem.step() used after the response was sent'));
    }
    return this.noting(this.op.step(name, fn));
  }
  call<R>(name: string, fn: (call: CallContext) => Promise<R>): Promise<R> {
    if (this.closed) {
      return Promise.reject(new InvalidArgumentError('idem.call() used after the response was sent'));
    }
    return this.noting(this.op.call(name, fn));
  }
  heartbeat(): Promise<void> {
    return this.op.heartbeat();
  }
  async run<I>(
    definition: OperationDefinition<I, StoredResponseMeta, Client>,
    input: I,
  ): Promise<CapturedResponse> {
    if (this.closed) throw new InvalidArgumentError('idem.run() used after the response was sent');
    if (definition.name !== this.operation) {
      throw new InvalidArgumentError(
        `this route's operation is "${this.operation}" but the definition is "${definition.name}": ` +
          `give the route config \`operation: '${definition.name}'\`, so that a completer finds its code`,
      );
    }
    const op = this.op as MultiStepOperation<Client> & { adopt?(input: KeptInput): Promise<void> };
    if (!op.adopt) throw new InvalidArgumentError('idem.run() needs the steps engine of idem.steps');
    await this.noting(op.adopt(encodeResult(input, `the input of operation "${definition.name}"`)));
    const outcome = toOutcome(await this.noting(definition.body(this.op, input)));
    if (outcome.resource) this.setResource(outcome.resource);
    return answerResponse(outcome);
  }
}
