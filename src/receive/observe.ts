import type { Context, Span } from '@opentelemetry/api';
import type { ParsedDelivery } from '../delivery/delivery.js';
import { shapeOutcome } from '../delivery/respond-hook.js';
import { silent } from '../observability/logger.js';
import { recordError, SpanAttributes } from '../observability/tracing.js';
import { type Outcome, OutcomeKind } from '../outcome.js';
import type { Runtime } from '../runtime/runtime.js';

export interface Observation {
  /** Parent of the child spans, when the delivery's span records. */
  readonly parent: Context | undefined;
  parsed?: ParsedDelivery;
  answeredBy?: 'memory' | 'redis' | 'postgres';
}

/** The `respond` hook's shape of the outcome; its metrics, span attributes and debug line. */
export function observed(rt: Runtime, span: Span | undefined, obs: Observation, decided: Outcome): Outcome {
  const o = rt.options;
  const d = obs.parsed;
  // The hook shapes the answer last: what is observed is what the sender receives.
  const outcome = o.respond ? shapeOutcome(o.respond, o.logger, decided, d) : decided;
  rt.metrics.delivery(outcome.kind);
  const answeredBy = outcome.kind === OutcomeKind.duplicate ? (obs.answeredBy ?? 'postgres') : undefined;
  if (answeredBy) rt.metrics.duplicate(answeredBy);
  if (obs.parent && span) {
    span.setAttributes({
      [SpanAttributes.source]: o.source,
      [SpanAttributes.outcome]: outcome.kind,
      [SpanAttributes.statusCode]: outcome.status,
      [SpanAttributes.keyPresent]: d ? d.key !== null : false,
    });
    if (d) span.setAttribute(SpanAttributes.eventId, d.id);
    if (d?.seq != null) span.setAttribute(SpanAttributes.seq, d.seq);
    if (answeredBy) span.setAttribute(SpanAttributes.answeredBy, answeredBy);
    if (outcome.status >= 500) recordError(span, undefined);
  }
  if (o.logger.debug === silent) return outcome;
  o.logger.debug(
    {
      source: o.source,
      id: d?.id,
      key: d?.key,
      seq: d?.seq,
      outcome: outcome.kind,
      status: outcome.status,
      answeredBy,
    },
    'webhook-inbox: delivery',
  );
  return outcome;
}
