/**
 * A delivery's claim and, when it says "apply", its handler: one transaction (src/apply/apply.ts).
 * Three claims (ordered or unordered, latest-wins) share one skeleton, `claimThenApply`: the
 * claim in its span, the event it took, the handler, and what a failure answers.
 */
import type { Kysely, Transaction } from 'kysely';
import { type ApplyStep, applyOne, type Run } from '../apply/apply.js';
import type { Background } from '../background/background.js';
import { DrainInTransaction } from '../background/drain.js';
import type { ClaimRow } from '../db/sql/claim.js';
import type { ClaimLatestRow } from '../db/sql/claim-latest.js';
import type { TakenEvent } from '../db/sql/taken-event.js';
import type { ParsedDelivery } from '../delivery/delivery.js';
import { storableHeaders } from '../delivery/payload.js';
import { inSpan } from '../observability/tracing.js';
import { notifyDeadLetter } from '../options/dead-letter-hook.js';
import type { Outcome } from '../outcome.js';
import type { Runtime } from '../runtime/runtime.js';
import { claimBatchesOf } from './claim-batches.js';
import type { Observation } from './observe.js';
import * as respond from './respond.js';

/** What a claim path settles to: an answer (and whether its key drains after it), or the claim committed without applying. */
type Settled<C> =
  | { readonly outcome: Outcome; readonly drain: boolean }
  | { readonly outcome?: undefined; readonly claim: C };

/** How one kind of claim is sent, and what it needs of the skeleton. */
interface ClaimPath<C extends { decision: string; attempts: number; receivedAt: Date }> {
  claim(tx: Kysely<any>): Promise<C>;
  /** The delivery as the apply path takes it, when the claim said "apply". */
  event(claim: C): TakenEvent;
  /** Whether the key drains after the response, once the claim's event was applied. */
  drainAfter?(claim: C): boolean;
  /** Right after the transaction committed (the event applied or not, or its failure recorded). */
  committed?(claim: C): void;
  /** Once the transaction is over: whether it committed. */
  settled?(committed: boolean): void;
  next?: ApplyStep<unknown>['next'];
  db?: Kysely<any>;
  alone?: boolean;
}

async function claimThenApply<C extends { decision: string; attempts: number; receivedAt: Date }>(
  rt: Runtime,
  d: ParsedDelivery,
  obs: Observation,
  path: ClaimPath<C>,
): Promise<Settled<C>> {
  const o = rt.options;
  let claimedAt = 0;
  let applied: Awaited<ReturnType<typeof applyOne<{ claim: C; event?: TakenEvent }>>>;
  let committed = false;
  try {
    applied = await applyOne(rt, {
      take: async (tx) => {
        claimedAt = performance.now();
        const claim = await inSpan(rt.tracer, 'webhook-inbox.claim', obs.parent, () => path.claim(tx));
        return claim.decision === 'apply' ? { claim, event: path.event(claim) } : { claim };
      },
      next: path.next,
      parent: obs.parent,
      db: path.db,
      alone: path.alone,
    });
    committed = true;
  } catch (err) {
    return { outcome: respond.infrastructureFailure(o, err), drain: false };
  } finally {
    path.settled?.(committed);
  }
  const claim = applied.took.claim;
  path.committed?.(claim);
  if (applied.status === 'failed') {
    const failure = applied.failure;
    // The handler threw RetryLater: the event waits until then, no attempt spent.
    if (failure?.decision === 'snoozed')
      return { outcome: respond.snoozed(d.id, failure.error.at), drain: false };
    if (failure?.decision !== 'dead') return { outcome: respond.handlerFailed(d.id), drain: false };
    // onPoison 'skip' moved the cursor past it: what waits behind it may run now.
    const outcome =
      failure.reason === 'rejected' ? respond.rejected(o, d.id) : respond.deadLettered(d.id, 'poison');
    return { outcome, drain: failure.drain };
  }
  rt.metrics.claimToCommit((performance.now() - claimedAt) / 1000);
  if (applied.status === 'applied')
    return { outcome: appliedOutcome(d, applied), drain: path.drainAfter?.(claim) ?? false };
  return { claim };
}

/**
 * The claim and, when it says "apply", the handler.
 *
 * An ordered delivery in inline mode applies the held events its claim made runnable in its
 * own transaction, up to a bound (`claimAndApplyOn`), and keeps its connection after COMMIT:
 * when events are left, it drains them on that connection right after the response, instead
 * of queueing for the pool again behind every delivery that arrived meanwhile (under load that
 * queue was most of a held event's wait).
 */
export function claimAndApply(
  rt: Runtime,
  bg: Background,
  d: ParsedDelivery,
  obs: Observation,
): Promise<Outcome> {
  // Latest-wins in deferred mode: the claim only stores the event, as an unordered one; the
  // worker that takes it decides under the object's key row (src/db/sql/latest-check.ts).
  if (d.latest && rt.options.mode !== 'deferred') return claimLatestAndApply(rt, d, d.latest, obs);
  const key = d.key;
  if (rt.options.mode === 'deferred') return claimDeferred(rt, bg, d, obs);
  if (key === null) return claimAndApplyOn(rt, bg, d, obs, undefined).then((settled) => settled.outcome);
  return new Promise<Outcome>((resolve) => {
    const work = rt.database.kysely.connection().execute(async (conn) => {
      const settled = await claimAndApplyOn(rt, bg, d, obs, conn);
      resolve(settled.outcome);
      if (settled.drain) await bg.drainOn(key, conn, obs.parent);
    });
    rt.track(work.catch((err) => resolve(respond.infrastructureFailure(rt.options, err))));
  });
}

/** A delivery the claim said to apply now, as the apply path takes it. */
function taken(
  d: Pick<ParsedDelivery, 'id' | 'key' | 'seq' | 'hash' | 'rawBody' | 'headers' | 'body' | 'type'>,
  claim: { attempts: number; receivedAt: Date; rowAtCommit?: boolean },
): TakenEvent {
  return {
    id: d.id,
    key: d.key,
    seq: d.seq,
    hash: d.hash,
    payload: d.rawBody,
    headers: d.headers,
    attempts: claim.attempts,
    receivedAt: claim.receivedAt,
    body: d.body,
    type: d.type,
    // The claim left the row unwritten: the apply path inserts it at COMMIT, with the result.
    rowAtCommit: claim.rowAtCommit,
  };
}

/**
 * How long a claim waits for a concurrent delivery of its id or key. With onInFlight 'reject'
 * it gives up at once (Postgres has no zero lock_timeout; 0 means none), answered 409 like a
 * timeout.
 */
function claimLockTimeout(rt: Runtime): string {
  return rt.options.onInFlight === 'reject' ? '1ms' : rt.lockTimeout;
}

/**
 * Latest-wins: `claim_latest` decides under the object's key row (superseded, or apply and move
 * its version), and the handler runs in the same transaction, as for any claim. The event row
 * has no key or seq: to the rest of the inbox it is an unordered event.
 */
async function claimLatestAndApply(
  rt: Runtime,
  d: ParsedDelivery,
  latest: NonNullable<ParsedDelivery['latest']>,
  obs: Observation,
): Promise<Outcome> {
  const o = rt.options;
  const settled = await claimThenApply<ClaimLatestRow>(rt, d, obs, {
    claim: (tx) =>
      rt.statements.claimLatest(tx, {
        source: o.source,
        id: d.id,
        key: latest.key,
        version: latest.version,
        hash: d.hash,
        lockTimeout: claimLockTimeout(rt),
      }),
    // To the rest of the inbox a latest-wins event is unordered: no key, no seq.
    event: (claim) => taken({ ...d, key: null, seq: null }, claim),
  });
  if (settled.outcome) return settled.outcome;
  const claim = settled.claim;
  if (claim.decision === 'superseded') {
    o.logger.debug(
      { id: d.id, key: latest.key, version: latest.version, latest: claim.latest, source: o.source },
      'webhook-inbox: superseded (a newer version of its key was applied)',
    );
    // Remembered as processed: a redelivery is a duplicate, answered with the recorded result.
    rt.rememberProcessed({ id: d.id, hash: d.hash, key: null, seq: null }, JSON.stringify(claim.result));
    return respond.superseded(d.id, latest.key, latest.version, claim.latest);
  }
  if (claim.decision === 'duplicate' && claim.reason !== 'ignored')
    rt.rememberDuplicate({ ...d, key: null, seq: null }, claim.result);
  return respond.decided(o, d, {
    decision: claim.decision,
    result: claim.result,
    expected: null,
    reason: claim.reason,
    attempts: claim.attempts,
    drain: false,
    receivedAt: claim.receivedAt,
  });
}

async function claimAndApplyOn(
  rt: Runtime,
  bg: Background,
  d: ParsedDelivery,
  obs: Observation,
  db: Kysely<any> | undefined,
): Promise<{ outcome: Outcome; drain: boolean }> {
  const o = rt.options;
  const ordered = d.key !== null;
  // Only an ordered event can be held (and so need its payload later) in this claim. A new
  // unordered event's row is written at COMMIT (its payload then too, with keepPayload), not
  // by the claim.
  const store = ordered;
  // Inline mode: when the claim says the next seq waits, the held events this delivery's commit
  // would make runnable are applied in its transaction, after its handler, up to a bound
  // (src/background/drain.ts); `drain` after the response is then what is left.
  let drain: DrainInTransaction | undefined;
  const settled = await claimThenApply<ClaimRow>(rt, d, obs, {
    claim: (tx) =>
      rt.statements.claim(tx, {
        source: o.source,
        id: d.id,
        key: d.key,
        seq: d.seq,
        hash: d.hash,
        payload: store ? d.rawBody : null,
        headers: store ? storableHeaders(d.headers, o.secretHeaders) : null,
        apply: true,
        keepPayload: o.keepPayload,
        firstSeen: o.firstSeq === 'first-seen',
        maxHeld: o.maxHeldPerKey,
        maxAhead: o.maxSeqAhead,
        lockTimeout: claimLockTimeout(rt),
      }),
    event: (claim) => {
      if (claim.drain && ordered) drain = new DrainInTransaction(rt, d.key!, obs.parent);
      return taken(d, claim);
    },
    next: ordered
      ? (tx: Transaction<any>, last: Run) => drain?.next(tx, last) ?? Promise.resolve(undefined)
      : undefined,
    db,
    settled: (committed) => drain?.end(committed),
    committed: (claim) => rt.duplicateOdds.note(claim.decision === 'duplicate'),
    drainAfter: (claim) => drain?.rest ?? claim.drain,
  });
  if (settled.outcome) return settled;
  return { outcome: answer(rt, bg, d, settled.claim), drain: settled.claim.drain };
}

/**
 * Deferred mode: the claim stores the event for a worker and applies nothing, so it needs no
 * transaction of the handler's: it is sent with the other deliveries' claims waiting for an
 * acknowledgement connection, one statement and one commit for them all (./claim-batches.ts).
 */
async function claimDeferred(
  rt: Runtime,
  bg: Background,
  d: ParsedDelivery,
  obs: Observation,
): Promise<Outcome> {
  const o = rt.options;
  let claim: ClaimRow;
  try {
    claim = await inSpan(rt.tracer, 'webhook-inbox.claim', obs.parent, () =>
      claimBatchesOf(rt).claim({
        id: d.id,
        key: d.key,
        seq: d.seq,
        hash: d.hash,
        payload: d.rawBody,
        headers: storableHeaders(d.headers, o.secretHeaders),
      }),
    );
  } catch (err) {
    return respond.infrastructureFailure(o, err);
  }
  rt.duplicateOdds.note(claim.decision === 'duplicate');
  return answer(rt, bg, d, claim);
}

/** What a claim that applied nothing answers, and what it leaves to do (the caches, the lanes, a dead letter's report). */
function answer(rt: Runtime, bg: Background, d: ParsedDelivery, claim: ClaimRow): Outcome {
  const o = rt.options;
  if (claim.decision === 'dead' && claim.reason === 'late') {
    // Counted per late delivery: a redelivery of a late event (rare: it was answered 200) counts again.
    rt.metrics.deadLetter('late');
    o.logger.error(
      { id: d.id, key: d.key, seq: d.seq, source: o.source },
      'webhook-inbox: dead-lettered (late: its seq was skipped by a gap timeout)',
    );
    notifyDeadLetter(
      o.onDeadLetter,
      o.logger,
      { source: o.source, id: d.id, key: d.key, seq: d.seq, reason: 'late', attempts: 0, receivedAt: null },
      { fingerprint: null, message: null, error: undefined },
    );
  } else if (claim.decision === 'duplicate' && claim.reason !== 'ignored') {
    // The caches hold processed events only: an ignored one's redelivery asks the claim again.
    rt.rememberDuplicate(d, claim.result);
  } else if (claim.decision === 'pending') {
    bg.pendingStored(d.key);
  } else if (claim.decision === 'held') {
    // Its gap times out from its arrival: the sweeper passes then (src/background/sweeper.ts).
    bg.heldStored(claim.receivedAt.getTime());
  } else if (
    claim.decision === 'mismatch' &&
    (claim.reason === 'seq-applied' || claim.reason === 'seq-taken')
  ) {
    // A sender that restarted its counter, or two events at one seq: visible, never dropped quietly.
    rt.metrics.seqConflict(claim.reason === 'seq-applied' ? 'applied' : 'waiting');
    o.logger.warn(
      { id: d.id, key: d.key, seq: d.seq, source: o.source, reason: claim.reason },
      'webhook-inbox: a new id at a seq its key already applied or holds (422)',
    );
  }
  return respond.decided(o, d, claim);
}

/** The answer to a delivery applied now: processed, or ignored when no handler takes its type. */
function appliedOutcome(d: ParsedDelivery, run: { ignored: boolean; result: unknown }): Outcome {
  return run.ignored ? respond.ignored(d.id, d.type) : respond.processed(d.id, run.result);
}
