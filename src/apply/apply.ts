/** A taken event's handler, result or failure, in its take's transaction while the event is locked. */
import type { Context } from '@opentelemetry/api';
import type { Kysely, Transaction } from 'kysely';
import type { TakenEvent } from '../db/sql/taken-event.js';
import { storedLatestOf } from '../delivery/delivery.js';
import { storableHeaders } from '../delivery/payload.js';
import { HandlerError, RetryLater } from '../errors.js';
import type { Runtime } from '../runtime/runtime.js';
import { type RecordedFailure, recordFailure, recordSnooze, reportFailure } from './failed-runs.js';
import { runHandler } from './run-handler.js';

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

/** READ COMMITTED whatever the server default: the SQL relies on each statement seeing what committed before. */
export function inTransaction<T>(db: Kysely<any>, body: (tx: Transaction<any>) => Promise<T>): Promise<T> {
  return db.transaction().setIsolationLevel('read committed').execute(body);
}

/** Right after the take of `event`: its handler, and its result or failure recorded. */
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

/** The handler of a taken event, under its savepoint; a throw is recorded (RetryLater: snoozed). */
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

/** A run's result, recorded last so that it rides on what follows (COMMIT, or the next take or savepoint). */
export async function recordResult(rt: Runtime, tx: Transaction<any>, run: Applied): Promise<void> {
  const { event, json } = run;
  const o = rt.options;
  if (event.rowAtCommit) await recordApplied(rt, tx, run);
  else if (event.markAtCommit || run.ignored) {
    // The take left the row waiting: marked here, riding on what follows.
    await markApplied(rt, tx, event, json ?? null, recorded(event, run, o.secretHeaders));
  } else if (json !== undefined) await rt.statements.storeResult(tx, o.source, event, json);
}

/** After COMMIT: only now may the events be remembered and counted as processed. */
export function reportCommitted(rt: Runtime, runs: readonly (Run | undefined)[]): void {
  for (const run of runs) {
    if (!run) continue;
    if (run.status === 'failed') reportFailure(rt, run.event, run.failure);
    else if (run.ignored) {
      // The caches hold processed events only.
      rt.metrics.ignored(run.type);
    } else {
      if (!run.superseded) rt.metrics.handler(run.seconds, 'processed');
      rt.rememberProcessed(run.event, run.json);
    }
  }
}

/** Latest-wins: how long a stored event waits when another transaction holds its object's key. */
const LATEST_BUSY_MS = 50;

/** Latest-wins, for a pending event a worker took, before its handler: busy is snoozed. */
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
    const later = new RetryLater({ afterMs: LATEST_BUSY_MS });
    return { status: 'failed', event, failure: await recordSnooze(rt, tx, event, later) };
  }
  if (check.decision !== 'superseded') return undefined;
  const result = { superseded: true, key: latest.key, version: latest.version, latest: check.latest };
  const json = JSON.stringify(result);
  await markApplied(rt, tx, event, json, { status: 'processed', type: null, payload: null, headers: null });
  o.logger.debug(
    { id: event.id, key: latest.key, version: latest.version, latest: check.latest, source: o.source },
    'webhook-inbox: superseded (a newer version of its key was applied)',
  );
  return { status: 'applied', event, result, json, seconds: 0, ignored: false, type: null, superseded: true };
}

interface Recorded {
  status: 'processed' | 'ignored';
  type: string | null;
  payload: Buffer | null;
  headers: Record<string, string> | null;
}

function markApplied(
  rt: Runtime,
  tx: Transaction<any>,
  event: TakenEvent,
  json: string | null,
  row: Recorded,
): Promise<void> {
  const o = rt.options;
  return rt.statements.markApplied(tx, {
    source: o.source,
    id: event.id,
    key: event.key,
    json,
    keepPayload: o.keepPayload,
    ...row,
  });
}

/** An ignored event keeps its payload whatever `keepPayload` says, for a replay once a handler exists. */
function recorded(
  event: TakenEvent,
  ran: { ignored: boolean; type: string | null },
  secretHeaders: ReadonlySet<string>,
): Recorded {
  return ran.ignored
    ? {
        status: 'ignored',
        type: ran.type,
        payload: event.payload,
        headers: storableHeaders(event.headers, secretHeaders),
      }
    : { status: 'processed', type: ran.type, payload: null, headers: null };
}

/** The row of a new event the claim left unwritten, written at COMMIT with its result. */
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
