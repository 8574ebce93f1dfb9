/**
 * OpenTelemetry spans through `@opentelemetry/api`: a no-op until the application installs
 * an SDK (or passes option `tracerProvider`). One span per delivery, `webhook-inbox.receive`,
 * with children `webhook-inbox.claim`, `webhook-inbox.handler` and `webhook-inbox.drain`.
 *
 * Child spans are only started when the delivery's span is recording (sampled, SDK present),
 * so an app without tracing pays for one no-op span per delivery and nothing more.
 */
import {
  type Context,
  context,
  INVALID_SPAN_CONTEXT,
  isSpanContextValid,
  type Span,
  SpanStatusCode,
  type Tracer,
  type TracerProvider,
  trace,
} from '@opentelemetry/api';

export const TRACER_NAME = 'webhook-inbox';

/** Span attribute names. */
export const SpanAttributes = Object.freeze({
  outcome: 'webhook_inbox.outcome',
  source: 'webhook_inbox.source',
  eventId: 'webhook_inbox.event_id',
  keyPresent: 'webhook_inbox.key_present',
  seq: 'webhook_inbox.seq',
  answeredBy: 'webhook_inbox.answered_by',
  applied: 'webhook_inbox.applied',
  statusCode: 'http.response.status_code',
} as const);

export function createTracer(provider: TracerProvider | undefined): Tracer {
  return (provider ?? trace.getTracerProvider()).getTracer(TRACER_NAME);
}

/**
 * Runs `fn` in a new span `name`, made active as `tracer.startActiveSpan` does, so that spans
 * the handler starts nest under it. A span with no valid context (no SDK installed and none
 * active to inherit from) is not made active: nothing could nest under it or propagate from
 * it, and making it active costs a context object per delivery. A sampled-out span of an SDK
 * has a valid context, and is made active.
 */
export function inActiveSpan<T>(tracer: Tracer, name: string, fn: (span: Span) => T): T {
  const span = tracer.startSpan(name);
  const spanContext = span.spanContext();
  // The no-op tracer's own constant first: no hex check of its ids per delivery.
  if (spanContext === INVALID_SPAN_CONTEXT || !isSpanContextValid(spanContext)) return fn(span);
  return context.with(trace.setSpan(context.active(), span), fn, undefined, span);
}

/** The context to parent child spans on, or undefined when the span records nothing. */
export function parentOf(span: Span): Context | undefined {
  return span.isRecording() ? trace.setSpan(context.active(), span) : undefined;
}

export function recordError(span: Span, err: unknown): void {
  if (err instanceof Error) span.recordException(err);
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/**
 * Runs `fn` in a child span of `parent` (made active, so spans the handler starts nest under
 * it). Without a recording parent, just runs `fn`: its own promise, not one more that adopts
 * it (microtask turns and a promise fewer per claim and per handler run). Every caller awaits it inside
 * an async function, so a synchronous throw of `fn` still arrives as a rejection.
 */
export function inSpan<T>(
  tracer: Tracer,
  name: string,
  parent: Context | undefined,
  fn: (span: Span | undefined) => Promise<T>,
): Promise<T> {
  if (!parent) return fn(undefined);
  return inChildSpan(tracer, name, parent, fn);
}

async function inChildSpan<T>(
  tracer: Tracer,
  name: string,
  parent: Context,
  fn: (span: Span | undefined) => Promise<T>,
): Promise<T> {
  const span = tracer.startSpan(name, undefined, parent);
  try {
    return await context.with(trace.setSpan(parent, span), () => fn(span));
  } catch (err) {
    recordError(span, err);
    throw err;
  } finally {
    span.end();
  }
}
