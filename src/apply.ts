/**
 * The one apply path. Every way an event gets applied goes through `applyOne`: the inline
 * receive (taken by `claim`), drains (`take_next`), the sweeper and workers (`take_pending`,
 * `take_turn` then `advance`). In one transaction it takes the event, runs the handler with
 * its span, timeout and metrics, and stores the result; after COMMIT it remembers the event as
 * processed. When the handler throws, the transaction rolls back to the savepoint the take left
 * (src/sql/failed-run.ts) and `recordFailure` counts the attempt (backoff, poison, dead letter,
 * key blocked) in the same transaction, while the event is still locked: nobody can take it
 * in between and run it again. Those statements ride on COMMIT: a failed run costs what a
 * successful one does. `reportFailure` then counts and logs it.
 */
import type { Context } from '@opentelemetry/api';
import { type Kysely, sql, type Transaction } from 'kysely';
import { HandlerError, RejectEvent } from './errors.js';
import type { InboxEvent } from './event.js';
import { runHandler as runWithContext } from './handler-context.js';
import { parseBody, storableHeaders } from './payload.js';
import type { Runtime } from './runtime.js';
import type { FailRow } from './sql/fail.js';
import { APPLY_SAVEPOINT } from './sql/failed-run.js';
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
  /** The handler threw; `failure` is what was recorded, in the same transaction. */
  | {
      readonly status: 'failed';
      readonly took: T;
      readonly event: TakenEvent;
      readonly failure: FailRow;
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
  let failure: FailRow | undefined;
  // The SQL state machine relies on READ COMMITTED (each statement sees what committed before
  // it, e.g. a claim that waited for a key lock); said explicitly, whatever the server default.
  await (step.db ?? rt.database.kysely)
    .transaction()
    .setIsolationLevel('read committed')
    .execute(async (tx) => {
      took = await step.take(tx);
      const event = took.event;
      if (!event) return;
      if (!rt.database.sendsThen) await sql.raw(APPLY_SAVEPOINT).execute(tx);
      try {
        ({ result, json } = await runHandler(rt, tx, event, step.parent));
      } catch (err) {
        if (!(err instanceof HandlerError)) throw err;
        failure = await recordFailure(rt, tx, event, err.cause);
        return;
      }
      await step.finish?.(tx, event);
      // Last before COMMIT, so that it rides on it (src/drivers/pg.ts): one round trip fewer.
      if (json !== undefined) await rt.statements.storeResult(tx, rt.options.source, event.id, json);
    });
  const taken = took as T;
  if (!taken.event) return { status: 'none', took: taken };
  if (failure) {
    reportFailure(rt, taken.event, failure);
    return { status: 'failed', took: taken, event: taken.event, failure };
  }
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
    // A stored payload that no longer parses (or no longer passes `bodySchema`) fails like a
    // handler would: counted, then poison. Checked again here so that `event.body` is the
    // schema's output for a held or pending event too.
    const body =
      'body' in taken ? taken.body : parseBody(taken.payload, taken.headers['content-type'], o.parse);
    const event: InboxEvent = {
      id: taken.id,
      source: o.source,
      key: taken.key,
      seq: taken.seq,
      body: o.bodySchema && !('body' in taken) ? await o.bodySchema.check(body) : body,
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
 * Records a failed run inside its transaction, after the handler threw: back to the savepoint
 * the take left (the handler's writes undone, the event still locked), the event waiting again,
 * then `fail` counts the attempt and, past `maxAttempts` (at once for RejectEvent), dead-letters
 * it and blocks or skips its key (`onPoison`). None of it is read back before COMMIT, so what
 * `fail` decides is computed here from the attempts the take read under the same lock.
 */
async function recordFailure(
  rt: Runtime,
  tx: Transaction<any>,
  event: TakenEvent,
  cause: unknown,
): Promise<FailRow> {
  const o = rt.options;
  const { id, key, seq } = event;
  const reason = cause instanceof RejectEvent ? 'rejected' : 'poison';
  const maxAttempts = reason === 'rejected' ? 1 : o.maxAttempts;
  o.logger.warn({ err: cause, id, key, seq, source: o.source }, 'webhook-inbox: handler failed');
  const headers = storableHeaders(event.headers);
  await rt.statements.undoTake(tx, {
    source: o.source,
    id,
    key,
    seq,
    waiting: event.waiting ?? 'pending',
    payload: event.payload,
    headers,
  });
  await rt.statements.fail(tx, {
    source: o.source,
    id,
    key,
    seq,
    hash: event.hash,
    payload: event.payload,
    headers,
    error: errorMessage(cause),
    maxAttempts,
    onPoison: o.onPoison,
    retryInMs: backoffMs(event.attempts, o.retryBaseMs, o.retryCapMs),
    receivedAt: event.receivedAt,
    deadReason: reason,
  });
  const attempts = event.attempts + 1;
  const dead = attempts >= maxAttempts;
  return {
    decision: dead ? 'dead' : 'failed',
    attempts,
    // onPoison 'skip' moved the cursor past it: what waits behind it may run now.
    drain: dead && key !== null && o.onPoison === 'skip',
    reason: dead ? reason : undefined,
  };
}

/** After COMMIT: a dead letter is counted and said, and so is the key it blocks. */
function reportFailure(rt: Runtime, event: TakenEvent, failure: FailRow): void {
  if (failure.decision !== 'dead') return;
  const o = rt.options;
  const { id, key, seq } = event;
  const reason = failure.reason ?? 'poison';
  rt.metrics.deadLetter(reason);
  o.logger.info(
    { id, key, seq, source: o.source, attempts: failure.attempts },
    `webhook-inbox: dead-lettered (${reason})`,
  );
  if (key !== null && o.onPoison === 'block') {
    o.logger.info({ key, blockedSeq: seq, source: o.source }, 'webhook-inbox: key blocked (poison)');
  }
}
