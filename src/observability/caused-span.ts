/**
 * The receiving side of a trace that crossed a process boundary.
 *
 * A message's consumer: a handler (an inbox message's, a claimed
 * task's) runs on behalf of the intent its message or task names, in a span whose *parent* is the
 * producer's span (the `traceparent` the message carried).
 *
 * Parent, not link: one message is one causal step of the producer's intent (the payment's
 * `payment.created` event is consumed because the payment happened), and a parent makes the
 * consumer's work one more branch of the producer's trace, which is what "what happened to order
 * 1001?" wants to see in a tracing UI. Links are for work that has several causes (a batch that
 * folds many messages); idem handles one message per handler, so it has one cause.
 */
import { context, SpanKind, SpanStatusCode, trace, type Attributes } from '@opentelemetry/api';
import {
  formatTraceparent,
  parseTraceparent,
  runCausedBy,
  runInTraceOf,
  type Causation,
} from '../core/causation.js';
import { tracing } from './events.js';

const tracer = trace.getTracer('idem');

/**
 * Runs `fn` on behalf of `cause` (`actedFor`: see `runCausedBy`), inside a consumer span named `name` that continues the trace of
 * `cause.traceparent` (a no-op span, and no span at all, unless a tracer provider is registered).
 */
export function runInCause<T>(
  name: string,
  cause: Causation,
  attributes: Attributes,
  fn: () => Promise<T>,
  actedFor?: { ref: string | null },
): Promise<T> {
  if (!tracing()) return runCausedBy(cause, fn, actedFor);
  const remote = parseTraceparent(cause.traceparent);
  const parent = remote ? trace.setSpanContext(context.active(), remote) : context.active();
  const spanAttributes = cause.intent === null ? attributes : { ...attributes, 'idem.intent': cause.intent };
  return tracer.startActiveSpan(
    name,
    { kind: SpanKind.CONSUMER, attributes: spanAttributes },
    parent,
    async (span) => {
      try {
        // The span is active now: what the handler writes names it as its trace context.
        return await runCausedBy(cause, fn, actedFor);
      } catch (error) {
        span.setStatus({
          code: SpanStatusCode.ERROR,
          message: error instanceof Error ? error.name : 'error',
        });
        throw error;
      } finally {
        span.end();
      }
    },
  );
}

/**
 * Runs `fn` (an HTTP request's operation) in the caller's trace, named by the request's
 * `traceparent`. With a tracer provider registered and no span active yet, the spans `fn` starts
 * have that context as their remote parent; a span that is already active (the app's own HTTP
 * instrumentation, which read the same header) wins, and idem's span is its child as usual.
 * Without a tracer provider, what `fn` writes records the caller's `traceparent` and the messages
 * it causes carry it, as a consumer's handler does with its message's. An invalid value is ignored.
 *
 * Parent, not link, for the same reason as a message's: the request is the one cause of the
 * operation it runs.
 */
export function continueTrace<T>(traceparent: string | undefined, fn: () => Promise<T>): Promise<T> {
  const remote = parseTraceparent(traceparent);
  if (!remote) return fn();
  if (!tracing()) return runInTraceOf(formatTraceparent(remote), fn);
  if (trace.getSpan(context.active()) !== undefined) return fn();
  return context.with(trace.setSpanContext(context.active(), remote), fn);
}
