/**
 * The consumer's side of a trace that crossed a message: a handler (an inbox message's, a claimed
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
import { parseTraceparent, runCausedBy, type Causation } from '../core/causation.js';
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
