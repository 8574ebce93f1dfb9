/**
 * The one apply path. Every way an event gets applied goes through `applyOne`: the inline
 * receive (taken by `claim`), drains (`take_next`), the sweeper and workers (`take_pending`,
 * `take_turn` then `advance`). In one transaction it takes the event, runs the handler with
 * its span, timeout and metrics, and stores the result; after COMMIT it remembers the event as
 * processed. When the handler throws, the transaction has rolled back and `recordFailure`
 * counts the attempt (backoff, poison, dead letter, key blocked, metric, log) in one more
 * round trip of its own.
 */
import type { Context } from '@opentelemetry/api';
import type { Kysely, Transaction } from 'kysely';
import { HandlerError, RejectEvent } from './errors.js';
import type { InboxEvent } from './event.js';
import { runHandler as runWithContext } from './handler-context.js';
import { parseBody, storableHeaders } from './payload.js';
import type { Runtime } from './runtime.js';
import type { FailRow } from './sql/fail.js';
import type { TakenEvent } from './sql/taken-event.js';
import { inSpan } from './tracing.js';

/**
 * Capped exponential backoff with full jitter (the AWS architecture blog's "full jitter"): the
 * wait before an event whose handler failed `previousAttempts` times is run again.
 */
export function backoffMs(previousAttempts: number, baseMs: number, capMs: number): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(previousAttempts, 30));
  return Math.floor(Math.random() * ceiling);
}

/** How one transaction takes its event, and what it does after the handler. */
export interface ApplyStep<T extends { readonly event?: TakenEvent }> {
  /** Inside the transaction: take the event to apply now (none: commit and stop). */
  take(tx: Transaction<any>): Promise<T>;
  /** After the handler, before its result is stored and COMMIT (a worker moves the cursor here). */
  finish?(tx: Transaction<any>, event: TakenEvent): Promise<void>;
  /** The parent of the handler's span (a delivery's or a drain's). */
  parent?: Context;
  /** Where to run the transaction: a connection the caller holds, else the pool. */
  db?: Kysely<any>;
}

export type Applied<T> =
  /** Nothing to apply: the taker found no event, or decided something else (a claim's duplicate). */
  | { readonly status: 'none'; readonly took: T }
  | { readonly status: 'applied'; readonly took: T; readonly event: TakenEvent; readonly result: unknown }
  /** The handler threw; `failure` is what `fail` recorded (undefined when even that failed). */
  | {
      readonly status: 'failed';
      readonly took: T;
      readonly event: TakenEvent;
      readonly failure: FailRow | undefined;
    };

/**
 * One transaction: take, run the handler, store its result, COMMIT. Errors other than the
 * handler's (the database, a lock timeout) are thrown to the caller, which knows what they mean
 * for it: a 409 or 503 for a delivery, a log line for a drain.
 */
export async function applyOne<T extends { readonly event?: TakenEvent }>(
  rt: Runtime,
  step: ApplyStep<T>,
): Promise<Applied<T>> {
  let took: T | undefined;
  let result: unknown;
  let json: string | undefined;
  try {
    // The SQL state machine relies on READ COMMITTED (each statement sees what committed before
    // it, e.g. a claim that waited for a key lock); said explicitly, whatever the server default.
    await (step.db ?? rt.database.kysely)
      .transaction()
      .setIsolationLevel('read committed')
      .execute(async (tx) => {
        took = await step.take(tx);
        const event = took.event;
        if (!event) return;
        ({ result, json } = await runHandler(rt, tx, event, step.parent));
        await step.finish?.(tx, event);
        // Last before COMMIT, so that it rides on it (src/drivers/pg.ts): one round trip fewer.
        if (json !== undefined) await rt.statements.storeResult(tx, rt.options.source, event.id, json);
      });
  } catch (err) {
    if (err instanceof HandlerError && took?.event) {
      // On the same connection when the caller holds one: asking the pool for another while
      // holding one can wait forever (PGlite has a single session; a full pool, likewise).
      const failure = await recordFailure(rt, took.event, err.cause, step.db);
      return { status: 'failed', took, event: took.event, failure };
    }
    throw err;
  }
  const taken = took as T;
  if (!taken.event) return { status: 'none', took: taken };
  // Committed: only now may the event be remembered as processed.
  rt.rememberProcessed(taken.event, json);
  return { status: 'applied', took: taken, event: taken.event, result };
}

/** Runs the handler in `tx`; its result, as JSON for storing. Any throw becomes a HandlerError. */
async function runHandler(
  rt: Runtime,
  tx: Transaction<any>,
  taken: TakenEvent,
  parent: Context | undefined,
): Promise<{ result: unknown; json: string | undefined }> {
  const o = rt.options;
  const started = performance.now();
  let result: unknown;
  let json: string | undefined;
  try {
    const event: InboxEvent = {
      id: taken.id,
      source: o.source,
      key: taken.key,
      seq: taken.seq,
      // A stored payload that no longer parses fails like a handler would: counted, then poison.
      body: 'body' in taken ? taken.body : parseBody(taken.payload, taken.headers['content-type'], o.parse),
      rawBody: taken.payload,
      headers: taken.headers,
      attempt: taken.attempts + 1,
      receivedAt: taken.receivedAt,
    };
    // runHandler gives the handler its context (signal, idempotencyKey) and enforces
    // handlerTimeoutMs; it throws HandlerError.
    result = await inSpan(rt.tracer, 'webhook-inbox.handler', parent, () =>
      runWithContext(o.handle, event, tx, o.handlerTimeoutMs),
    );
    json = result === undefined ? undefined : JSON.stringify(result);
  } catch (err) {
    rt.metrics.handler((performance.now() - started) / 1000, 'failed');
    throw err instanceof HandlerError ? err : new HandlerError(err);
  }
  rt.metrics.handler((performance.now() - started) / 1000, 'processed');
  return { result, json };
}

function errorMessage(err: unknown): string {
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return message.slice(0, 2000);
}

/**
 * Counts a failed run (its transaction rolled back): one round trip, `fail`. Dead-letters the
 * event as poison after `maxAttempts` (at once, as rejected, when the handler threw
 * RejectEvent), and then blocks or skips its key (`onPoison`). Returns undefined when even
 * that failed (logged): the event is then retried as if never run.
 */
export async function recordFailure(
  rt: Runtime,
  event: TakenEvent,
  cause: unknown,
  db: Kysely<any> = rt.database.kysely,
): Promise<FailRow | undefined> {
  const o = rt.options;
  const { id, key, seq } = event;
  const deadReason = cause instanceof RejectEvent ? 'rejected' : 'poison';
  o.logger.warn({ err: cause, id, key, seq, source: o.source }, 'webhook-inbox: handler failed');
  let row: FailRow;
  try {
    row = await rt.statements.fail(db, {
      source: o.source,
      id,
      key,
      seq,
      hash: event.hash,
      payload: event.payload,
      headers: storableHeaders(event.headers),
      error: errorMessage(cause),
      maxAttempts: deadReason === 'rejected' ? 1 : o.maxAttempts,
      onPoison: o.onPoison,
      retryInMs: backoffMs(event.attempts, o.retryBaseMs, o.retryCapMs),
      receivedAt: event.receivedAt,
      deadReason,
    });
  } catch (failErr) {
    o.logger.error({ err: failErr, id }, 'webhook-inbox: could not record the failed attempt');
    return undefined;
  }
  if (row.decision === 'dead') row = { ...row, reason: deadReason };
  if (row.decision === 'dead') {
    rt.metrics.deadLetter(deadReason);
    o.logger.info(
      { id, key, seq, source: o.source, attempts: row.attempts },
      `webhook-inbox: dead-lettered (${deadReason})`,
    );
    if (key !== null && o.onPoison === 'block') {
      o.logger.info({ key, blockedSeq: seq, source: o.source }, 'webhook-inbox: key blocked (poison)');
    }
  }
  return row;
}
