/**
 * The one apply path. Every way an event gets applied goes through it: `applyOne` for the
 * inline receive (taken by `claim`, then the held events it made runnable by `take_next`, in
 * the same transaction: `next`), drains (`take_next`), the sweeper (`take_pending`) and
 * ordered keys' workers (`take_turn` then `advance`); `applyBatch` for deferred mode's workers
 * taking several unordered events at once (`take_pending` with a limit). Both are `applyTaken`:
 * in one transaction it takes, runs each handler with its span, timeout and metrics, and
 * stores each result (for a new event the claim left unwritten, inserts its row with the
 * result; for a stored event the take locked but left waiting, marks it processed with its
 * result); after COMMIT it remembers the events as processed. A take that never takes an event
 * (deferred mode's claim) is its own transaction (`alone`). When a handler
 * throws, the transaction rolls back to that event's savepoint (src/db/sql/failed-run.ts) and
 * `recordFailure` (src/apply/failed-runs.ts) counts the attempt (backoff, poison, dead letter, key blocked) in the same
 * transaction, while the event is still locked: nobody can take it in between and run it
 * again. Those statements ride on what follows (COMMIT, or the next event's savepoint): a
 * failed run costs what a successful one does. `reportFailure` then counts and logs it.
 */
import type { Context } from '@opentelemetry/api';
import type { Kysely, Transaction } from 'kysely';
import type { TakenEvent } from '../db/sql/taken-event.js';
import { storedLatestOf } from '../delivery/delivery.js';
import { storableHeaders } from '../delivery/payload.js';
import { HandlerError, RetryLater } from '../errors.js';
import type { Runtime } from '../runtime/runtime.js';
import { type RecordedFailure, recordFailure, recordSnooze, reportFailure } from './failed-runs.js';
import { runHandler } from './run-handler.js';

/** How one transaction takes its event (or events), and what it does after each handler. */
export interface ApplyStep<T> {
  /** Inside the transaction (`alone`: as it): take what to apply now (nothing: commit and stop). */
  take(tx: Kysely<any>): Promise<T>;
  /**
   * The take never takes an event (deferred mode's claim: it only stores): on our drivers it
   * is sent alone, a READ COMMITTED transaction of its own in one round trip
   * (src/db/drivers/fold.ts), so the locks it takes are released inside PostgreSQL at its end,
   * not after its answer has crossed back to us and COMMIT has come.
   */
  alone?: boolean;
  /** After the handler, before its result is stored and COMMIT (a worker moves the cursor here). */
  finish?(tx: Transaction<any>, event: TakenEvent): Promise<void>;
  /**
   * After the take's own events, and after each event it returns, inside the transaction: the
   * next event to apply in it, already taken (its savepoint sent with its take, as the first
   * event's is), with the parent of its handler's span; nothing: COMMIT. A delivery that fills
   * a key's gap applies the held events it made runnable here (src/background/drain.ts). Each
   * is run and reported as the take's own are; `applyOne` still returns the take's event.
   */
  next?(tx: Transaction<any>, last: Run): Promise<{ event: TakenEvent; parent?: Context } | undefined>;
  /**
   * A batch stops before its next event once its handlers have run this long (ms): the events
   * it took and did not run, locked and untouched, are left waiting at COMMIT for the next
   * take. Their handlers' row locks are held until the batch commits: slow handlers in one
   * transaction held a shared row (an account's balance) for the whole batch, and every other
   * lane's handler waited for it (issue 41: 6.5 events/s against inline's 32 with 300 ms
   * handlers).
   */
  budgetMs?: number;
  /** The parent of the handler's span (a delivery's or a drain's). */
  parent?: Context;
  /** Where to run the transaction: a connection the caller holds, else the pool. */
  db?: Kysely<any>;
}

/** What one taken event's run came to, in its transaction (committed when it is returned). */
export type Run =
  | {
      readonly status: 'applied';
      readonly event: TakenEvent;
      readonly result: unknown;
      /** No handler takes its type (`handlers`): recorded `ignored`, no handler ran. */
      readonly ignored: boolean;
      readonly type: string | null;
    }
  /** The handler threw; `failure` is what was recorded, in the same transaction. */
  | { readonly status: 'failed'; readonly event: TakenEvent; readonly failure: RecordedFailure };

export type Applied<T> =
  /** Nothing to apply: the taker found no event, or decided something else (a claim's duplicate). */
  { readonly status: 'none'; readonly took: T } | (Run & { readonly took: T });

/**
 * One transaction: take, run the handler, store its result, COMMIT. Errors other than the
 * handler's (the database, a lock timeout) are thrown to the caller, which knows what they mean
 * for it: a 409 or 503 for a delivery, a log line for a drain.
 */
export async function applyOne<T extends { readonly event?: TakenEvent }>(
  rt: Runtime,
  step: ApplyStep<T>,
): Promise<Applied<T>> {
  const { took, runs } = await applyTaken(rt, step, (t) => (t.event ? [t.event] : []));
  const run = runs[0];
  return run ? { ...run, took } : { status: 'none', took };
}

/**
 * One transaction for several events (deferred mode's workers: `take_pending` with a limit):
 * each runs as `applyOne` runs its one, under a savepoint of its own, so a handler that throws
 * undoes only its own writes and its failure is recorded as `applyOne` records it, while the
 * others' results commit. They all commit together, or (COMMIT failed, the connection died)
 * none does and every event is pending again.
 */
export async function applyBatch(
  rt: Runtime,
  step: ApplyStep<readonly TakenEvent[]>,
): Promise<readonly Run[]> {
  return (await applyTaken(rt, step, (events) => events)).runs;
}

/**
 * The apply path itself, for one event or several. The take's own savepoint (its `after`)
 * covers the first event; each next one opens a savepoint of its own, and with it the previous
 * event's stored result (or recorded failure) goes in the same round trip (src/db/drivers/fold.ts:
 * held-back statements ride on the next registered one), so a batch of n costs the handlers'
 * statements + n + 1. Events `next` takes afterwards cost one round trip each likewise: the
 * previous result, the take and its savepoint. Savepoints nest (none is released): ROLLBACK TO
 * names the latest, the failed event's own.
 */
async function applyTaken<T>(
  rt: Runtime,
  step: ApplyStep<T>,
  eventsOf: (took: T) => readonly TakenEvent[],
): Promise<{ took: T; runs: RunDone[] }> {
  let took: T | undefined;
  const runs: RunDone[] = [];
  if (step.alone && rt.database.readCommittedAlone) {
    // On the connections no handler holds (`ackPoolSize`): an acknowledgement never queues
    // behind the workers' handlers for a connection.
    took = await step.take(step.db ?? rt.database.acks);
    // Committed already: a handler run here would not be in the claim's transaction.
    if (eventsOf(took).length > 0) throw new Error('webhook-inbox: a take sent alone took an event');
    return { took, runs };
  }
  // The SQL state machine relies on READ COMMITTED (each statement sees what committed before
  // it, e.g. a claim that waited for a key lock); said explicitly, whatever the server default.
  await (step.db ?? rt.database.kysely)
    .transaction()
    .setIsolationLevel('read committed')
    .execute(async (tx) => {
      took = await step.take(tx);
      const events = eventsOf(took);
      const began = performance.now();
      for (let i = 0; i < events.length; i++) {
        if (i > 0 && step.budgetMs !== undefined && performance.now() - began >= step.budgetMs) break;
        // The first event's savepoint is the take's; each next one's is sent before it.
        const savepoint = i > 0 ? rt.statements.applySavepoint : rt.statements.takeSavepoint;
        if (savepoint) await savepoint(tx);
        runs.push(await runTaken(rt, tx, events[i] as TakenEvent, step, step.parent));
      }
      // The take's `after` sent the next event's savepoint after it (after the previous event's
      // result, which rode on the take): a failed run there undoes only its own writes.
      let last = runs.at(-1);
      while (last && step.next) {
        const next = await step.next(tx, last);
        if (!next) break;
        if (rt.statements.takeSavepoint) await rt.statements.takeSavepoint(tx);
        last = await runTaken(rt, tx, next.event, step, next.parent);
        runs.push(last);
      }
    });
  // Committed: only now may the events be remembered, and their handler runs counted, as
  // processed (a COMMIT that failed, e.g. 23505 on a new event's row, applied nothing).
  for (const run of runs) {
    if (run.status === 'failed') reportFailure(rt, run.event, run.failure);
    else if (run.ignored) {
      // Not remembered in the caches, which hold processed events only: a redelivery is
      // answered by the claim, from the row (ignored again, 200).
      rt.metrics.ignored(run.type);
    } else {
      if (!run.superseded) rt.metrics.handler(run.seconds, 'processed');
      rt.rememberProcessed(run.event, run.json);
    }
  }
  return { took: took as T, runs };
}

/** A run inside its transaction, with what is reported only after COMMIT. */
type RunDone =
  | (Extract<Run, { status: 'applied' }> & {
      readonly json?: string;
      readonly seconds: number;
      /** Latest-wins: recorded superseded, no handler ran. */
      readonly superseded?: boolean;
    })
  | Extract<Run, { status: 'failed' }>;

/** Latest-wins: how long a stored event waits when another transaction holds its object's key. */
const LATEST_BUSY_MS = 50;

/**
 * One taken event, inside its transaction and under its savepoint: the handler, then its
 * result stored, with the row's mark as processed for a stored event (last, so that it rides on what follows: COMMIT, or the next event's
 * savepoint); or, when the handler threw, the failure recorded.
 */
async function runTaken(
  rt: Runtime,
  tx: Transaction<any>,
  event: TakenEvent,
  step: ApplyStep<unknown>,
  parent: Context | undefined,
): Promise<RunDone> {
  const o = rt.options;
  // Latest-wins, for a stored event (its claim only stored it: deferred mode, or a failed run
  // retried): decided here, under the object's key row, right before the handler.
  const latest =
    o.order.policy === 'latest' && event.markAtCommit && event.key === null
      ? storedLatestOf(o.order, event.headers, event.payload, event.body)
      : null;
  if (latest) {
    const check = await rt.statements.latestCheck(tx, o.source, latest.key, latest.version);
    if (check.decision === 'busy') {
      // Another version of the object is being applied: wait a moment, no attempt counted.
      const later = new RetryLater({ afterMs: LATEST_BUSY_MS });
      return { status: 'failed', event, failure: await recordSnooze(rt, tx, event, later) };
    }
    if (check.decision === 'superseded') {
      const result = { superseded: true, key: latest.key, version: latest.version, latest: check.latest };
      const json = JSON.stringify(result);
      await rt.statements.markApplied(tx, {
        source: o.source,
        id: event.id,
        json,
        keepPayload: o.keepPayload,
        status: 'processed',
        type: null,
        payload: null,
        headers: null,
      });
      o.logger.debug(
        { id: event.id, key: latest.key, version: latest.version, latest: check.latest, source: o.source },
        'webhook-inbox: superseded (a newer version of its key was applied)',
      );
      return {
        status: 'applied',
        event,
        result,
        json,
        seconds: 0,
        ignored: false,
        type: null,
        superseded: true,
      };
    }
  }
  let ran: Awaited<ReturnType<typeof runHandler>>;
  try {
    ran = await runHandler(rt, tx, event, parent);
  } catch (err) {
    if (!(err instanceof HandlerError)) throw err;
    const failure =
      err.cause instanceof RetryLater
        ? await recordSnooze(rt, tx, event, err.cause)
        : await recordFailure(rt, tx, event, err.cause);
    return { status: 'failed', event, failure };
  }
  const { result, json, seconds, ignored, type } = ran;
  await step.finish?.(tx, event);
  if (event.rowAtCommit) await recordApplied(rt, tx, event, json, ran);
  else if (event.markAtCommit || ignored) {
    // The take locked the row and left it waiting: marked processed here, with the result, in
    // one UPDATE riding on what follows (src/db/sql/mark-applied.ts). Nothing in this
    // transaction reads the row's status in between (`advance` and take_next's `more` read the
    // next seq's row; a batch's take_pending selected all its rows before any handler ran).
    // An ignored event the claim marked processed (latest-wins; a waiting one claimed again)
    // is marked here too, in place of its result: its payload goes back in, for a replay.
    await rt.statements.markApplied(tx, {
      source: rt.options.source,
      id: event.id,
      json: json ?? null,
      keepPayload: rt.options.keepPayload,
      ...recorded(event, ran, rt.options.secretHeaders),
    });
  } else if (json !== undefined) await rt.statements.storeResult(tx, rt.options.source, event.id, json);
  return { status: 'applied', event, result, json, seconds, ignored, type };
}

/**
 * What the row records of how it was applied: its status and type, and for an ignored event
 * its payload and headers whatever `keepPayload` says: a handler written later applies it from
 * them (`webhook-inbox ignored replay`).
 */
function recorded(
  event: TakenEvent,
  ran: { ignored: boolean; type: string | null },
  secretHeaders: ReadonlySet<string>,
): {
  status: 'processed' | 'ignored';
  type: string | null;
  payload: Buffer | null;
  headers: Record<string, string> | null;
} {
  return ran.ignored
    ? {
        status: 'ignored',
        type: ran.type,
        payload: event.payload,
        headers: storableHeaders(event.headers, secretHeaders),
      }
    : { status: 'processed', type: ran.type, payload: null, headers: null };
}

/**
 * The row of a new event the claim left unwritten (unordered, or ordered in its turn), written
 * at COMMIT with its result (src/db/sql/record-applied.ts): its payload and headers only with
 * `keepPayload`, as the claim would have kept them.
 */
function recordApplied(
  rt: Runtime,
  tx: Transaction<any>,
  event: TakenEvent,
  json: string | undefined,
  ran: { ignored: boolean; type: string | null },
): Promise<void> {
  const o = rt.options;
  const kept = o.keepPayload && !ran.ignored;
  const row = recorded(event, ran, o.secretHeaders);
  return rt.statements.recordApplied(tx, {
    source: o.source,
    id: event.id,
    key: event.key,
    seq: event.seq,
    hash: event.hash,
    json: json ?? null,
    status: row.status,
    type: row.type,
    payload: kept ? event.payload : row.payload,
    headers: kept ? storableHeaders(event.headers, o.secretHeaders) : row.headers,
  });
}
