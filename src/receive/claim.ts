/** A delivery's claim and, when it says "apply", its handler: one transaction per kind of claim. */
import type { Kysely, Transaction } from 'kysely';
import { applyTaken, inTransaction, type Run, reportCommitted } from '../apply/apply.js';
import type { Background } from '../background/background.js';
import { DrainInTransaction } from '../background/drain.js';
import type { ClaimArgs, ClaimRow } from '../db/sql/claim.js';
import type { ClaimLatestRow } from '../db/sql/claim-latest.js';
import type { TakenEvent } from '../db/sql/taken-event.js';
import type { ParsedDelivery } from '../delivery/delivery.js';
import { storableHeaders } from '../delivery/payload.js';
import { inSpan } from '../observability/tracing.js';
import { notifyDeadLetter } from '../options/dead-letter-hook.js';
import type { Outcome } from '../outcome.js';
import type { Runtime } from '../runtime/runtime.js';
import { claimBatchesOf, claimLockTimeout } from './claim-batches.js';
import type { Observation } from './observe.js';
import * as respond from './respond.js';

interface Took<C> {
  readonly claimedAt: number;
  readonly claim: C;
  readonly run?: Run;
}

export function claimAndApply(
  rt: Runtime,
  bg: Background,
  d: ParsedDelivery,
  obs: Observation,
): Promise<Outcome> {
  // Latest-wins in deferred mode is stored unordered; the worker decides (db/sql/latest-check.ts).
  if (rt.options.mode === 'deferred') return claimDeferred(rt, bg, d, obs);
  if (d.latest) return claimLatestAndApply(rt, d, d.latest, obs);
  if (d.key === null) return claimUnorderedAndApply(rt, bg, d, obs);
  return claimOrderedAndApply(rt, bg, d, d.key, obs);
}

/** Unordered, inline: [BEGIN + try-claim (else the claim) + SAVEPOINT], the handler, [its row + COMMIT]. */
async function claimUnorderedAndApply(
  rt: Runtime,
  bg: Background,
  d: ParsedDelivery,
  obs: Observation,
): Promise<Outcome> {
  const args = claimArgs(rt, d, false);
  let took: Took<ClaimRow>;
  try {
    took = await claimInline(
      rt,
      obs,
      async (tx) => (await rt.statements.tryClaim?.(tx, args)) ?? rt.statements.claim(tx, args),
      (claim) => taken(d, claim),
    );
  } catch (err) {
    return respond.infrastructureFailure(rt.options, err);
  }
  rt.duplicateOdds.note(took.claim.decision === 'duplicate');
  return took.run ? ranOutcome(rt, d, took.run, took.claimedAt) : claimedOutcome(rt, bg, d, took);
}

/** Ordered, inline, on a connection kept after COMMIT, where what the claim left runnable drains after. */
function claimOrderedAndApply(
  rt: Runtime,
  bg: Background,
  d: ParsedDelivery,
  key: string,
  obs: Observation,
): Promise<Outcome> {
  return new Promise<Outcome>((resolve) => {
    const work = rt.database.kysely.connection().execute(async (conn) => {
      const settled = await claimOrderedOn(rt, bg, d, key, obs, conn);
      resolve(settled.outcome);
      if (settled.drain) await bg.drainOn(key, conn, obs.parent);
    });
    rt.track(work.catch((err) => resolve(respond.infrastructureFailure(rt.options, err))));
  });
}

/** [BEGIN + claim + SAVEPOINT] + handler, up to DRAIN_IN_TRANSACTION held events, [result + COMMIT]. */
async function claimOrderedOn(
  rt: Runtime,
  bg: Background,
  d: ParsedDelivery,
  key: string,
  obs: Observation,
  conn: Kysely<any>,
): Promise<{ outcome: Outcome; drain: boolean }> {
  const args = claimArgs(rt, d, false);
  let took: Took<ClaimRow> & { held?: Run[] };
  let drain: DrainInTransaction | undefined;
  let committed = false;
  try {
    took = await inTransaction(conn, async (tx) => {
      const claimedAt = performance.now();
      const claim = await inClaimSpan(rt, obs, () => rt.statements.claim(tx, args));
      if (claim.decision !== 'apply') return { claimedAt, claim };
      const run = await applyTaken(rt, tx, taken(d, claim), obs.parent);
      if (run.status === 'failed' || !claim.drain) return { claimedAt, claim, run };
      drain = new DrainInTransaction(rt, key, obs.parent);
      return { claimedAt, claim, run, held: await drain.applyHeld(tx) };
    });
    committed = true;
    reportCommitted(rt, [took.run, ...(took.held ?? [])]);
  } catch (err) {
    return { outcome: respond.infrastructureFailure(rt.options, err), drain: false };
  } finally {
    drain?.end(committed);
  }
  const { claim, run } = took;
  rt.duplicateOdds.note(claim.decision === 'duplicate');
  if (!run) return { outcome: claimedOutcome(rt, bg, d, took), drain: claim.drain };
  const rest = drain ? drain.rest : run.status === 'failed' && run.failure.drain;
  return { outcome: ranOutcome(rt, d, run, took.claimedAt), drain: rest };
}

/** Latest-wins, inline: claim_latest decides under the object's key row; its event row is unordered. */
async function claimLatestAndApply(
  rt: Runtime,
  d: ParsedDelivery,
  latest: NonNullable<ParsedDelivery['latest']>,
  obs: Observation,
): Promise<Outcome> {
  const o = rt.options;
  const args = { source: o.source, id: d.id, ...latest, hash: d.hash, lockTimeout: claimLockTimeout(rt) };
  let took: Took<ClaimLatestRow>;
  try {
    took = await claimInline(
      rt,
      obs,
      (tx) => rt.statements.claimLatest(tx, args),
      (claim) => taken({ ...d, key: null, seq: null }, claim),
    );
  } catch (err) {
    return respond.infrastructureFailure(o, err);
  }
  if (took.run) return ranOutcome(rt, d, took.run, took.claimedAt);
  rt.metrics.claimToCommit((performance.now() - took.claimedAt) / 1000);
  const { claim } = took;
  if (claim.decision === 'superseded') {
    o.logger.debug(
      { id: d.id, key: latest.key, version: latest.version, latest: claim.latest, source: o.source },
      'webhook-inbox: superseded (a newer version of its key was applied)',
    );
    rt.rememberProcessed({ id: d.id, hash: d.hash, key: null, seq: null }, JSON.stringify(claim.result));
    return respond.superseded(d.id, latest.key, latest.version, claim.latest);
  }
  if (claim.decision === 'duplicate' && claim.reason !== 'ignored')
    rt.rememberDuplicate({ ...d, key: null, seq: null }, claim.result);
  return respond.decided(o, d, { ...claim, decision: claim.decision, expected: null, drain: false });
}

/** One transaction: the claim and, when it says "apply", the handler. */
async function claimInline<C extends { decision: string; attempts: number; receivedAt: Date }>(
  rt: Runtime,
  obs: Observation,
  claimIn: (tx: Transaction<any>) => Promise<C>,
  event: (claim: C) => TakenEvent,
): Promise<Took<C>> {
  const took = await inTransaction(rt.database.kysely, async (tx): Promise<Took<C>> => {
    const claimedAt = performance.now();
    const claim = await inClaimSpan(rt, obs, () => claimIn(tx));
    if (claim.decision !== 'apply') return { claimedAt, claim };
    return { claimedAt, claim, run: await applyTaken(rt, tx, event(claim), obs.parent) };
  });
  reportCommitted(rt, [took.run]);
  return took;
}

async function claimDeferred(
  rt: Runtime,
  bg: Background,
  d: ParsedDelivery,
  obs: Observation,
): Promise<Outcome> {
  let took: Took<ClaimRow>;
  try {
    took = await sendDeferredClaim(rt, d, obs);
  } catch (err) {
    return respond.infrastructureFailure(rt.options, err);
  }
  rt.duplicateOdds.note(took.claim.decision === 'duplicate');
  return claimedOutcome(rt, bg, d, took);
}

/** One claim of a `claim_many` batch, on `Database.acks`: it never queues behind the workers' handlers. */
async function sendDeferredClaim(rt: Runtime, d: ParsedDelivery, obs: Observation): Promise<Took<ClaimRow>> {
  const { id, key, seq, hash, payload, headers, type, group } = claimArgs(rt, d, true);
  const claimedAt = performance.now();
  const claim = await inClaimSpan(rt, obs, () =>
    claimBatchesOf(rt).claim({ id, key, seq, hash, payload, headers, type, group }),
  );
  return { claimedAt, claim };
}

function inClaimSpan<T>(rt: Runtime, obs: Observation, claim: () => Promise<T>): Promise<T> {
  return inSpan(rt.tracer, 'webhook-inbox.claim', obs.parent, claim);
}

function claimArgs(rt: Runtime, d: ParsedDelivery, deferred: boolean): ClaimArgs {
  const o = rt.options;
  // Inline, only an ordered event can be held and need its payload later.
  const store = deferred || d.key !== null;
  return {
    source: o.source,
    id: d.id,
    key: d.key,
    seq: d.seq,
    hash: d.hash,
    payload: store ? d.rawBody : null,
    headers: store ? storableHeaders(d.headers, o.secretHeaders) : null,
    apply: !deferred,
    keepPayload: o.keepPayload,
    firstSeen: o.firstSeq === 'first-seen',
    maxHeld: o.maxHeldPerKey,
    maxAhead: o.maxSeqAhead,
    lockTimeout: claimLockTimeout(rt),
    type: d.type,
    group: d.group,
  };
}

function taken(
  d: Pick<ParsedDelivery, 'id' | 'key' | 'seq' | 'hash' | 'rawBody' | 'headers' | 'body' | 'type' | 'group'>,
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
    group: d.group,
    rowAtCommit: claim.rowAtCommit,
  };
}

/** The answer to a delivery whose event ran in its claim's transaction, committed. */
function ranOutcome(rt: Runtime, d: ParsedDelivery, run: Run, claimedAt: number): Outcome {
  const o = rt.options;
  if (run.status === 'failed') {
    const failure = run.failure;
    if (failure.decision === 'snoozed') return respond.snoozed(d.id, failure.error.at);
    if (failure.decision !== 'dead') return respond.handlerFailed(d.id);
    return failure.reason === 'rejected' ? respond.rejected(o, d.id) : respond.deadLettered(d.id, 'poison');
  }
  rt.metrics.claimToCommit((performance.now() - claimedAt) / 1000);
  return run.ignored ? respond.ignored(d.id, d.type) : respond.processed(d.id, run.result);
}

function claimedOutcome(rt: Runtime, bg: Background, d: ParsedDelivery, took: Took<ClaimRow>): Outcome {
  const o = rt.options;
  const claim = took.claim;
  rt.metrics.claimToCommit((performance.now() - took.claimedAt) / 1000);
  if (claim.decision === 'dead' && claim.reason === 'late') {
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
    rt.rememberDuplicate(d, claim.result);
  } else if (claim.decision === 'pending') {
    bg.pendingStored(d.key);
  } else if (claim.decision === 'held') {
    bg.heldStored(claim.receivedAt.getTime());
  } else if (
    claim.decision === 'mismatch' &&
    (claim.reason === 'seq-applied' || claim.reason === 'seq-taken')
  ) {
    rt.metrics.seqConflict(claim.reason === 'seq-applied' ? 'applied' : 'waiting');
    o.logger.warn(
      { id: d.id, key: d.key, seq: d.seq, source: o.source, reason: claim.reason },
      'webhook-inbox: a new id at a seq its key already applied or holds (422)',
    );
  }
  return respond.decided(o, d, claim);
}
