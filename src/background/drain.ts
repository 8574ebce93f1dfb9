/** Inline drains: the gap-filling delivery applies the first held events, then the rest after it. */
import type { Context, Span } from '@opentelemetry/api';
import type { Kysely, Transaction } from 'kysely';
import { applyTaken, type Run } from '../apply/apply.js';
import { parentOf, recordError, SpanAttributes } from '../observability/tracing.js';
import type { Runtime } from '../runtime/runtime.js';
import { applyNextInline } from './turns.js';

/** `wait`: wait (bounded) for the key's lock; `db`: a held connection. */
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

/** At most this many in the delivery's transaction: its sender waits; 64 subtransactions slow snapshots. */
export const DRAIN_IN_TRANSACTION = 8;

/** Held events drained in the gap-filler's transaction, each under its own savepoint. */
export class DrainInTransaction {
  rest = false;
  readonly #rt: Runtime;
  readonly #key: string;
  readonly #parent: Context | undefined;
  #span: Span | undefined;
  #spanParent: Context | undefined;
  #started = 0;
  #applied = 0;

  constructor(rt: Runtime, key: string, parent: Context | undefined) {
    this.#rt = rt;
    this.#key = key;
    this.#parent = parent;
  }

  async applyHeld(tx: Transaction<any>): Promise<Run[]> {
    const rt = this.#rt;
    const o = rt.options;
    this.#start();
    const runs: Run[] = [];
    let more = false;
    for (;;) {
      if (runs.length >= DRAIN_IN_TRANSACTION || rt.closing) {
        this.rest = more;
        return runs;
      }
      const took = await rt.statements.takeNext(tx, o.source, this.#key, true, rt.lockTimeout);
      if (!took) return runs;
      more = took.more;
      const run = await applyTaken(rt, tx, took.event, this.#spanParent);
      runs.push(run);
      if (run.status === 'failed') {
        this.rest = run.failure.drain;
        return runs;
      }
      this.#applied++;
      if (!more) return runs;
    }
  }

  #start(): void {
    this.#started = performance.now();
    // Only under a recording delivery span: this is the hot path.
    if (!this.#parent) return;
    this.#span = this.#rt.tracer.startSpan('webhook-inbox.drain', undefined, this.#parent);
    this.#spanParent = parentOf(this.#span);
  }

  end(committed: boolean): void {
    const applied = committed ? this.#applied : 0;
    if (applied > 0) this.#rt.metrics.drain((performance.now() - this.#started) / 1000);
    if (!this.#span) return;
    if (this.#spanParent) {
      this.#span.setAttributes({
        [SpanAttributes.source]: this.#rt.options.source,
        [SpanAttributes.applied]: applied,
      });
    }
    if (!committed) recordError(this.#span, undefined);
    this.#span.end();
  }
}
