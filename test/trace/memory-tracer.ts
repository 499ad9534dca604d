/**
 * A minimal in-memory tracer provider on `@opentelemetry/api` (the SDK is not installed): it
 * records every span's name, ids, parent and attributes, and makes a started span active the way
 * the SDK does, so idem's spans and the trace context it writes can be asserted.
 */
import { randomBytes } from 'node:crypto';
import { AsyncLocalStorage } from 'node:async_hooks';
import {
  context,
  ROOT_CONTEXT,
  trace,
  TraceFlags,
  type Attributes,
  type Context,
  type ContextManager,
  type Span,
  type SpanContext,
  type SpanOptions,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';

export interface RecordedSpan {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  kind: number | undefined;
  attributes: Attributes;
  ended: boolean;
}

/** AsyncLocalStorage as the context manager (what the SDK's async-hooks manager does). */
class StorageContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    ctx: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    return this.storage.run(ctx, () => fn.call(thisArg, ...args));
  }
  bind<T>(_ctx: Context, target: T): T {
    return target;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    return this;
  }
}

class MemorySpan implements Span {
  constructor(
    private readonly context: SpanContext,
    readonly record: RecordedSpan,
  ) {}
  spanContext(): SpanContext {
    return this.context;
  }
  setAttribute(key: string, value: Attributes[string]): this {
    if (value !== undefined) this.record.attributes[key] = value;
    return this;
  }
  setAttributes(attributes: Attributes): this {
    Object.assign(this.record.attributes, attributes);
    return this;
  }
  addEvent(): this {
    return this;
  }
  addLink(): this {
    return this;
  }
  addLinks(): this {
    return this;
  }
  setStatus(): this {
    return this;
  }
  updateName(name: string): this {
    this.record.name = name;
    return this;
  }
  end(): void {
    this.record.ended = true;
  }
  isRecording(): boolean {
    return true;
  }
  recordException(): void {}
}

class MemoryTracer implements Tracer {
  constructor(private readonly spans: RecordedSpan[]) {}

  startSpan(name: string, options: SpanOptions = {}, ctx: Context = context.active()): Span {
    const parent = trace.getSpanContext(ctx);
    const valid = parent !== undefined && trace.isSpanContextValid(parent);
    const spanContext: SpanContext = {
      traceId: valid ? parent.traceId : randomBytes(16).toString('hex'),
      spanId: randomBytes(8).toString('hex'),
      traceFlags: TraceFlags.SAMPLED,
    };
    const record: RecordedSpan = {
      name,
      traceId: spanContext.traceId,
      spanId: spanContext.spanId,
      parentSpanId: valid ? parent.spanId : null,
      kind: options.kind,
      attributes: { ...options.attributes },
      ended: false,
    };
    this.spans.push(record);
    return new MemorySpan(spanContext, record);
  }

  startActiveSpan<F extends (span: Span) => unknown>(name: string, ...rest: unknown[]): ReturnType<F> {
    const fn = rest.pop() as F;
    const [options, ctx] = rest as [SpanOptions | undefined, Context | undefined];
    const parent = ctx ?? context.active();
    const span = this.startSpan(name, options, parent);
    return context.with(trace.setSpan(parent, span), () => fn(span)) as ReturnType<F>;
  }
}

/** Registers the provider globally (once per process) and returns the spans it records. */
export function installMemoryTracer(): RecordedSpan[] {
  const spans: RecordedSpan[] = [];
  const provider: TracerProvider = { getTracer: () => new MemoryTracer(spans) };
  context.setGlobalContextManager(new StorageContextManager());
  trace.setGlobalTracerProvider(provider);
  return spans;
}
