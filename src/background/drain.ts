/**
 * Drains: an ordered key's waiting events applied in seq order, until the next one is missing
 * (or the key is blocked, or someone else holds it).
 *
 * In inline mode the delivery whose claim made held events runnable applies the first of them
 * in its own transaction, after its handler and before COMMIT (`DrainInTransaction`, at most
 * `DRAIN_IN_TRANSACTION`): it holds the key's row lock already, and a transaction of their own
 * would queue behind every other delivery for the database. What is left, it drains right after
 * its response on the same connection, each event in its own transaction (`drainInline`), as
 * the sweeper and operator actions do. A drain is a span of its own: a child of the delivery
 * that unblocked it, or a root for the sweeper.
 */
import type { Context, Span } from '@opentelemetry/api';
import type { Kysely, Transaction } from 'kysely';
import { applyTaken, type Run } from '../apply/apply.js';
import { parentOf, recordError, SpanAttributes } from '../observability/tracing.js';
import type { Runtime } from '../runtime/runtime.js';
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

/**
 * Held events a delivery applies in its own transaction, at most. Its sender waits for their
 * handlers (the response comes after COMMIT, and is its own event's), and the transaction
 * holds the key and every taken event's row lock meanwhile, with one savepoint per event (a
 * subtransaction each; past 64 PostgreSQL slows every session's snapshots): 8 keeps that to a
 * few handlers' time, while the short runs a reordering sender leaves behind a gap are applied
 * whole, with no transaction of their own to queue for. A longer backlog drains after the
 * response, where its handlers keep nobody waiting.
 */
export const DRAIN_IN_TRANSACTION = 8;

/**
 * Inline mode's drain inside the transaction of the delivery that filled a key's gap, once its
 * own event applied (src/receive/claim.ts). Each event is taken by `take_next`, which does not
 * wait (the claim locked the key row and moved the cursor in this transaction), and sends the
 * event's savepoint after it, with the previous event's result riding in front: a handler that
 * throws rolls back to its own savepoint and its failure is recorded there, the events before
 * it (the delivery's own included) untouched. It stops at a failed run, at the bound, or when
 * the next seq is not waiting; `rest` then says whether a drain after the response is due.
 * Any other error (the database's) rolls the whole transaction back: the delivery is answered
 * as any infrastructure failure and retried, with nothing applied.
 */
export class DrainInTransaction {
  /** After COMMIT: events may still wait behind the last one (the bound, or a skipped poison event). */
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

  /** The key's held events, each taken and applied in `tx`: their runs, reported after COMMIT. */
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
      // Not waiting (or not due: a retry's backoff): nothing more now, as for a drain after the response.
      if (!took) return runs;
      more = took.more;
      const run = await applyTaken(rt, tx, took.event, this.#spanParent);
      runs.push(run);
      if (run.status === 'failed') {
        // onPoison 'skip' moved the cursor past it: what waits behind it drains after the response.
        this.rest = run.failure.drain;
        return runs;
      }
      this.#applied++;
      if (!more) return runs;
    }
  }

  #start(): void {
    this.#started = performance.now();
    // Only under a recording delivery span: a drain in a delivery's transaction is on the hot path.
    if (!this.#parent) return;
    this.#span = this.#rt.tracer.startSpan('webhook-inbox.drain', undefined, this.#parent);
    this.#spanParent = parentOf(this.#span);
  }

  /** After the transaction: counted as a drain when it committed held events, its span ended. */
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
