/** One span per delivery; its children start only when it records, so no tracing costs one no-op span. */
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

/** Runs `fn` in a new active span, so the handler's spans nest under it; without an SDK, not made active. */
export function inActiveSpan<T>(tracer: Tracer, name: string, fn: (span: Span) => T): T {
  const span = tracer.startSpan(name);
  const spanContext = span.spanContext();
  if (spanContext === INVALID_SPAN_CONTEXT || !isSpanContextValid(spanContext)) return fn(span);
  return context.with(trace.setSpan(context.active(), span), fn, undefined, span);
}

export function parentOf(span: Span): Context | undefined {
  return span.isRecording() ? trace.setSpan(context.active(), span) : undefined;
}

export function recordError(span: Span, err: unknown): void {
  if (err instanceof Error) span.recordException(err);
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/** Runs `fn` in an active child span of `parent`; without one, just `fn` (no extra promise adopting it). */
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
