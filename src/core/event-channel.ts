/**
 * One typed event channel for everything idem reports: what happened (an operation ended, events
 * published, a duplicate skipped, a receipt dead-lettered) and the errors a worker survives. Every
 * module takes the same `events` option; `idem/metrics` subscribes to it, and so can a logger.
 *
 * Why not a Node EventEmitter, as graphile-worker's `WorkerEvents`: an emitter's `emit('error')`
 * with no listener throws, and a listener that throws propagates into the emitting code. Here a
 * listener's failure never changes what idem does, and an `error` nobody listens to is written to
 * stderr, one line, so a survived failure is never silent by default.
 *
 * @example
 * const events = createEvents();
 * events.on('operation', (e) => log.info(e, 'operation'));
 * events.on('error', ({ source, where, error }) => log.error({ source, where, err: error }));
 * const idem = createIdem({ sql, events });
 * const dispatcher = createOutboxDispatcher({ sql, publisher, events });
 */

/**
 * Every event idem emits and what it carries (docs: reference, "Events"). Each module adds its own
 * events beside its code, by declaration merging (`declare module '…/core/event-channel.js'`), so
 * that core depends on no module; an app sees the events of every subpath it imports. Payloads are
 * plain data; they never hold a request's payload or a secret.
 */
export interface IdemEventMap {
  /**
   * A failure a worker, a consumer or a middleware survived (the database down, a publisher's
   * error, a listener gone deaf, a handler's crash answered 500). Without a listener: one line on
   * stderr. `source` names the module (`dispatcher`, `completer`, `http`, …); `where` the place in
   * it (`batch`, `publish`, `listen`, …).
   */
  error: IdemErrorEvent;
}

/** The payload of the `error` event. */
export interface IdemErrorEvent {
  /** The module that survived it: `dispatcher`, `completer`, `claims-worker`, `http`, … */
  source: string;
  /** Where in that module: `batch`, `round`, `publish`, `listen`, `handler`, … */
  where: string;
  /** What was thrown (usually an `Error`; an `IdemError` carries `code` and `retryable`). */
  error: unknown;
}

/** An event name. */
export type IdemEventName = keyof IdemEventMap;

/** A listener of event `K`. */
export type IdemEventListener<K extends IdemEventName> = (event: IdemEventMap[K]) => void;

/** The channel: subscribe with `on`, modules report with `emit`. */
export interface IdemEvents {
  /** Calls `listener` with every `name` event; returns the function that unsubscribes it. */
  on<K extends IdemEventName>(name: K, listener: IdemEventListener<K>): () => void;
  /** Removes `listener` from `name`. */
  off<K extends IdemEventName>(name: K, listener: IdemEventListener<K>): void;
  /**
   * Reports `event` to every listener of `name`, synchronously, in subscription order. A listener
   * that throws is skipped (the others still run; the emitter never sees it).
   */
  emit<K extends IdemEventName>(name: K, event: IdemEventMap[K]): void;
  /** Whether `name` has a listener: lets an emitter skip building an event nobody reads. */
  has(name: IdemEventName): boolean;
}

/** Creates an event channel: one per application, passed as `events` to every module. */
export function createEvents(): IdemEvents {
  const listeners = new Map<IdemEventName, Set<(event: never) => void>>();
  const off = <K extends IdemEventName>(name: K, listener: IdemEventListener<K>) => {
    listeners.get(name)?.delete(listener);
  };
  return {
    on(name, listener) {
      let set = listeners.get(name);
      if (!set) listeners.set(name, (set = new Set()));
      set.add(listener);
      return () => off(name, listener);
    },
    off,
    emit(name, event) {
      const set = listeners.get(name);
      if (!set || set.size === 0) {
        if (name === 'error') writeUnheardError(event as IdemErrorEvent);
        return;
      }
      for (const listener of [...set]) {
        try {
          (listener as (event: unknown) => void)(event);
        } catch {
          // A listener's failure must never change what idem does.
        }
      }
    },
    has: (name) => (listeners.get(name)?.size ?? 0) > 0,
  };
}

/**
 * The channel of a helper that keeps none of its own (`retry`, the adapters) when its options have
 * none: no listeners, so only `error` does anything (stderr). Nothing can subscribe to it, so a
 * module that exposes its `events` defaults to a `createEvents()` of its own instead.
 */
export const unheardEvents: IdemEvents = Object.freeze({
  on: () => () => {},
  off: () => {},
  emit<K extends IdemEventName>(name: K, event: IdemEventMap[K]) {
    if (name === 'error') writeUnheardError(event as IdemErrorEvent);
  },
  has: () => false,
});

function writeUnheardError({ source, where, error }: IdemErrorEvent): void {
  const message = error instanceof Error ? error.message : String(error);
  const code = (error as { code?: unknown } | null)?.code;
  console.error(
    `[idem ${source}] ${where}: ${message}${typeof code === 'string' ? ` (${code})` : ''}` +
      ' (subscribe to events.on("error") to handle these)',
  );
}
