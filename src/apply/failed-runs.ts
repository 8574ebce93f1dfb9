/** What a failed handler run leaves: in its transaction the attempt, its cause or a snooze; then the report. */
import type { Transaction } from 'kysely';
import type { FailRow } from '../db/sql/fail.js';
import type { TakenEvent } from '../db/sql/taken-event.js';
import { storableHeaders } from '../delivery/payload.js';
import { RejectEvent, type RetryLater } from '../errors.js';
import { notifyDeadLetter } from '../options/dead-letter-hook.js';
import type { Runtime } from '../runtime/runtime.js';
import { causeOf } from './cause.js';
import { retrySchedule } from './retry-schedule.js';
import { eventType } from './run-handler.js';

/** What recording a failed run decided. `snoozed`: the handler threw RetryLater, no attempt spent. */
export type RecordedFailure =
  | (FailRow & { readonly cause: string; readonly error: unknown })
  | {
      readonly decision: 'snoozed';
      readonly attempts: number;
      readonly drain: false;
      readonly reason?: undefined;
      readonly cause?: undefined;
      readonly error: RetryLater;
    };

function errorMessage(err: unknown): string {
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return message.slice(0, 2000);
}

/** A failed run, back to the take's savepoint; `fail`'s decision comes from the attempts the take read. */
export async function recordFailure(
  rt: Runtime,
  tx: Transaction<any>,
  event: TakenEvent,
  cause: unknown,
): Promise<RecordedFailure> {
  const o = rt.options;
  const { id, key, seq } = event;
  const next = retrySchedule(o, event.attempts, event.receivedAt, cause instanceof RejectEvent);
  // A first failure is said; retries only at debug (a long outage is one line per event).
  (event.attempts === 0 ? o.logger.warn : o.logger.debug)(
    { err: cause, id, key, seq, source: o.source, attempt: event.attempts + 1 },
    'webhook-inbox: handler failed',
  );
  await rt.statements.fail(tx, {
    ...(await undoFailedTake(rt, tx, event)),
    error: errorMessage(cause),
    // 1 is "dead now", the largest int "not now".
    maxAttempts: next.dead ? 1 : 2_147_483_647,
    onPoison: o.onPoison,
    retryInMs: next.dead ? 0 : next.retryInMs,
    receivedAt: event.receivedAt,
    deadReason: next.dead ? next.reason : 'poison',
    type: eventType(rt, event),
    group: event.group,
  });
  const fingerprint = causeOf(cause);
  await rt.statements.recordCause(tx, o.source, event, fingerprint);
  return {
    decision: next.dead ? 'dead' : 'failed',
    attempts: event.attempts + 1,
    // onPoison 'skip' moved the cursor past it: what waits behind it may run now.
    drain: next.dead && key !== null && o.onPoison === 'skip',
    reason: next.dead ? next.reason : undefined,
    cause: fingerprint,
    error: cause,
  };
}

async function undoFailedTake(rt: Runtime, tx: Transaction<any>, event: TakenEvent) {
  const o = rt.options;
  const row = {
    source: o.source,
    id: event.id,
    key: event.key,
    seq: event.seq,
    hash: event.hash,
    payload: event.payload,
    headers: storableHeaders(event.headers, o.secretHeaders),
  };
  await rt.statements.undoTake(tx, { ...row, waiting: event.waiting ?? 'pending' });
  return row;
}

/** RetryLater: undone as a failed run, then the event waits until then, its attempts unchanged. */
export async function recordSnooze(
  rt: Runtime,
  tx: Transaction<any>,
  event: TakenEvent,
  later: RetryLater,
): Promise<RecordedFailure> {
  const o = rt.options;
  const { id, key, seq } = event;
  o.logger.debug(
    { id, key, seq, source: o.source, retryAt: later.at.toISOString() },
    'webhook-inbox: handler asked to retry later',
  );
  // A held group keeps its order: the event waits in its place, the group's hold until then.
  const holdsGroup = later.group && o.groups !== undefined && !!event.group;
  await rt.statements.snooze(tx, {
    ...(await undoFailedTake(rt, tx, event)),
    retryAt: holdsGroup ? event.receivedAt : later.at,
    receivedAt: event.receivedAt,
    type: eventType(rt, event),
    group: event.group,
  });
  if (holdsGroup) await rt.statements.holdGroup(tx, o.source, event.group!, later.at);
  return { decision: 'snoozed', attempts: event.attempts, drain: false, error: later };
}

/** What the operator does about a dead letter: a rejected one would be refused again by a replay. */
function deadLetterAdvice(reason: string, id: string, blocksKey: boolean): string {
  if (reason !== 'rejected')
    return `replay it with \`webhook-inbox dead replay ${id}\` once the cause is fixed`;
  return (
    'the handler refused it for good (RejectEvent), so a replay would refuse it again: ' +
    (blocksKey ? `skip it to unblock its key (\`webhook-inbox dead skip ${id}\`), then ` : '') +
    'purge it once read (`webhook-inbox dead purge --all --reason rejected`)'
  );
}

/** After COMMIT: a dead letter is counted and said, and so is the key it blocks; `onDeadLetter` is told. */
export function reportFailure(rt: Runtime, event: TakenEvent, failure: RecordedFailure): void {
  if (failure.decision !== 'dead') return;
  const o = rt.options;
  const { id, key, seq } = event;
  const reason = failure.reason ?? 'poison';
  rt.metrics.deadLetter(reason);
  rt.metrics.deadLetterCause(failure.cause);
  o.logger.error(
    { id, key, seq, source: o.source, attempts: failure.attempts, cause: failure.cause },
    `webhook-inbox: dead-lettered (${reason}); ${deadLetterAdvice(reason, id, key !== null && o.onPoison === 'block')}`,
  );
  notifyDeadLetter(
    o.onDeadLetter,
    o.logger,
    { source: o.source, id, key, seq, reason, attempts: failure.attempts, receivedAt: event.receivedAt },
    { fingerprint: failure.cause, message: errorMessage(failure.error), error: failure.error },
  );
  if (key !== null && o.onPoison === 'block') {
    o.logger.info({ key, blockedSeq: seq, source: o.source }, 'webhook-inbox: key blocked (poison)');
  }
}
