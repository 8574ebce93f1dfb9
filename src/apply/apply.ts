/**
 * The steps of applying a taken event, which every path that applies one calls in order, in
 * its own transaction (`inTransaction`): after its take (a delivery's claim,
 * src/receive/claim.ts; `take_next`, `take_turn`, `take_pending`, src/background/turns.ts and
 * drain.ts), `applyTaken` runs the handler under the take's savepoint with its span, timeout
 * and metrics (`runTaken`) and records its result (`recordResult`: for a new event the claim
 * left unwritten, inserts its row with the result; for a stored event the take locked but left
 * waiting, marks it processed with its result); after COMMIT, `reportCommitted` remembers the
 * events as processed. When a handler throws, the transaction rolls back to that event's
 * savepoint (src/db/sql/failed-run.ts) and `recordFailure` (src/apply/failed-runs.ts) counts
 * the attempt (backoff, poison, dead letter, key blocked) in the same transaction, while the
 * event is still locked: nobody can take it in between and run it again. Those statements
 * ride on what follows (COMMIT, or the next event's savepoint): a failed run costs what a
 * successful one does. `reportFailure` then counts and logs it, after COMMIT.
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

/** What one taken event's run came to, in its transaction (committed once it is reported). */
export type Run =
  | {
      readonly status: 'applied';
      readonly event: TakenEvent;
      readonly result: unknown;
      /** The result as stored, when the handler returned one. */
      readonly json?: string;
      readonly seconds: number;
      /** No handler takes its type (`handlers`): recorded `ignored`, no handler ran. */
      readonly ignored: boolean;
      readonly type: string | null;
      /** Latest-wins: recorded superseded, no handler ran. */
      readonly superseded?: boolean;
    }
  /** The handler threw; `failure` is what was recorded, in the same transaction. */
  | { readonly status: 'failed'; readonly event: TakenEvent; readonly failure: RecordedFailure };

type Applied = Extract<Run, { status: 'applied' }>;

/**
 * One transaction on `db`. The SQL state machine relies on READ COMMITTED (each statement sees
 * what committed before it, e.g. a claim that waited for a key lock); said explicitly, whatever
 * the server default. Errors other than a handler's (the database, a lock timeout) are thrown
 * to the caller, which knows what they mean for it: a 409 or 503 for a delivery, a log line
 * for a drain.
 */
export function inTransaction<T>(db: Kysely<any>, body: (tx: Transaction<any>) => Promise<T>): Promise<T> {
  return db.transaction().setIsolationLevel('read committed').execute(body);
}

/**
 * Right after the take of `event`: its handler and its result recorded, or its failure. The
 * savepoint it runs under is the take's: sent with the take on our drivers (its `after`), here
 * on a Kysely instance of the user's.
 */
export async function applyTaken(
  rt: Runtime,
  tx: Transaction<any>,
  event: TakenEvent,
  parent: Context | undefined,
): Promise<Run> {
  await rt.statements.takeSavepoint?.(tx);
  const run = await runTaken(rt, tx, event, parent);
  if (run.status === 'applied') await recordResult(rt, tx, run);
  return run;
}

/**
 * The handler of a taken event, under its savepoint; when it throws, the failure recorded
 * (a RetryLater: the event snoozed). Its result is not recorded yet (`recordResult`).
 */
export async function runTaken(
  rt: Runtime,
  tx: Transaction<any>,
  event: TakenEvent,
  parent: Context | undefined,
): Promise<Run> {
  try {
    return { status: 'applied', event, ...(await runHandler(rt, tx, event, parent)) };
  } catch (err) {
    if (!(err instanceof HandlerError)) throw err;
    const failure =
      err.cause instanceof RetryLater
        ? await recordSnooze(rt, tx, event, err.cause)
        : await recordFailure(rt, tx, event, err.cause);
    return { status: 'failed', event, failure };
  }
}

/**
 * A run's result, recorded last so that it rides on what follows (COMMIT, or the next event's
 * take or savepoint).
 */
export async function recordResult(rt: Runtime, tx: Transaction<any>, run: Applied): Promise<void> {
  const { event, json } = run;
  const o = rt.options;
  if (event.rowAtCommit) await recordApplied(rt, tx, run);
  else if (event.markAtCommit || run.ignored) {
    // The take locked the row and left it waiting: marked processed here, with the result, in
    // one UPDATE riding on what follows (src/db/sql/mark-applied.ts). Nothing in this
    // transaction reads the row's status in between (`advance` and take_next's `more` read the
    // next seq's row; a batch's take_pending selected all its rows before any handler ran).
    // An ignored event the claim marked processed (latest-wins; a waiting one claimed again)
    // is marked here too, in place of its result: its payload goes back in, for a replay.
    await rt.statements.markApplied(tx, {
      source: o.source,
      id: event.id,
      json: json ?? null,
      keepPayload: o.keepPayload,
      ...recorded(event, run, o.secretHeaders),
    });
  } else if (json !== undefined) await rt.statements.storeResult(tx, o.source, event.id, json);
}

/**
 * After COMMIT: only now may the events be remembered, and their handler runs counted, as
 * processed (a COMMIT that failed, e.g. 23505 on a new event's row, applied nothing).
 */
export function reportCommitted(rt: Runtime, runs: readonly (Run | undefined)[]): void {
  for (const run of runs) {
    if (!run) continue;
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
}

/** Latest-wins: how long a stored event waits when another transaction holds its object's key. */
const LATEST_BUSY_MS = 50;

/**
 * Latest-wins, for a pending event `take_pending` took (its claim only stored it: deferred
 * mode, or a failed run retried): decided under the object's key row, after its savepoint and
 * before its handler (src/db/sql/latest-check.ts). Busy: snoozed, no attempt counted;
 * superseded: recorded so, no handler run; undefined: its handler runs.
 */
export async function supersededOrBusy(
  rt: Runtime,
  tx: Transaction<any>,
  event: TakenEvent,
): Promise<Run | undefined> {
  const o = rt.options;
  if (o.order.policy !== 'latest') return undefined;
  const latest = storedLatestOf(o.order, event.headers, event.payload, event.body);
  if (!latest) return undefined;
  const check = await rt.statements.latestCheck(tx, o.source, latest.key, latest.version);
  if (check.decision === 'busy') {
    // Another version of the object is being applied: wait a moment, no attempt counted.
    const later = new RetryLater({ afterMs: LATEST_BUSY_MS });
    return { status: 'failed', event, failure: await recordSnooze(rt, tx, event, later) };
  }
  if (check.decision !== 'superseded') return undefined;
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
  return { status: 'applied', event, result, json, seconds: 0, ignored: false, type: null, superseded: true };
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
function recordApplied(rt: Runtime, tx: Transaction<any>, run: Applied): Promise<void> {
  const o = rt.options;
  const { event } = run;
  const kept = o.keepPayload && !run.ignored;
  const row = recorded(event, run, o.secretHeaders);
  return rt.statements.recordApplied(tx, {
    source: o.source,
    id: event.id,
    key: event.key,
    seq: event.seq,
    hash: event.hash,
    json: run.json ?? null,
    status: row.status,
    type: row.type,
    payload: kept ? event.payload : row.payload,
    headers: kept ? storableHeaders(event.headers, o.secretHeaders) : row.headers,
  });
}
