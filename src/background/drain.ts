/**
 * A drain: applies an ordered key's waiting events in seq order, each in its own transaction,
 * until the next one is missing (or the key is blocked, or someone else holds it). Started
 * right after the response of the delivery whose commit made them runnable, by the sweeper,
 * and by operator actions. A drain is a span of its own: a child of the delivery that
 * unblocked it, or a root for the sweeper.
 */
import type { Context } from '@opentelemetry/api';
import type { Kysely } from 'kysely';
import type { Runtime } from '../runtime.js';
import { parentOf, SpanAttributes } from '../tracing.js';
import { applyNextInline } from './turns.js';

/**
 * Inline mode's drain (`take_next`). `wait`: wait (bounded) for the key's lock. `db`: a
 * connection the caller holds, else the pool. Returns how many it applied.
 */
export async function drainInline(
  rt: Runtime,
  key: string,
  wait: boolean,
  parent: Context | undefined,
  db?: Kysely<any>,
): Promise<number> {
  const span = rt.tracer.startSpan('webhook-inbox.drain', undefined, parent);
  const spanParent = parentOf(span);
  const started = performance.now();
  let applied = 0;
  try {
    for (;;) {
      const step = await applyNextInline(rt, key, wait, spanParent, db);
      if (step.applied) applied++;
      if (!step.more || rt.closing) return applied;
    }
  } finally {
    if (applied > 0) rt.metrics.drain((performance.now() - started) / 1000);
    if (spanParent) {
      span.setAttributes({ [SpanAttributes.source]: rt.options.source, [SpanAttributes.applied]: applied });
    }
    span.end();
  }
}
