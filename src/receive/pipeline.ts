/**
 * The receive pipeline, one delivery's path: shed → read → verify → parse → memory → redis →
 * claim → apply → respond. Plain functions over the runtime; every outcome is built in
 * respond.ts.
 *
 * Round trips to Postgres per delivery (the hot path; a change that adds one says why, and
 * test/round-trips.test.ts pins them). BEGIN rides on the claim and the stored result on COMMIT
 * (src/drivers/pg.ts), so:
 * - unique event, applied now (unordered, or ordered and its turn):
 *   [BEGIN + claim + SAVEPOINT], <the handler's own statements>, [result + COMMIT]
 *   = the handler's + 2, what a bare transaction costs; with or without a result to replay.
 *   An unordered one's "claim" is the try-claim (src/sql/try-claim.ts): the id's try-lock and
 *   a read of its row, two prepared statements in the same query (on PGlite the read alone),
 *   cheaper for PostgreSQL than the claim function; when they cannot decide (the lock is
 *   another claim's and there is no row yet, or the row waits to be applied: a retry of a
 *   failed run), [claim + SAVEPOINT] follows = one round trip more.
 *   A new event's row is not written by the claim (which holds the id's advisory lock
 *   instead, and an ordered one's key row anyway) but at COMMIT, with its
 *   result: [row + result + COMMIT] is one INSERT, sent even without a result
 *   (src/sql/record-applied.ts); still the handler's + 2.
 * - an event no handler takes (option `handlers`): as a new event applied now, with no handler
 *   statements: [BEGIN + claim + SAVEPOINT], [row as `ignored` + COMMIT] = 2 (src/apply.ts);
 *   its redelivery as another duplicate (below), since neither cache remembers it.
 * - duplicate this instance saw processed (bounded LRU, `duplicateCacheSize`): 0.
 * - other duplicate, held, late, mismatch, buffer-full: [BEGIN + claim], COMMIT = 2 (an
 *   unordered processed duplicate or mismatch is decided by the try-claim).
 * - while most deliveries are duplicates (a retry storm; duplicate-odds.ts), a look before
 *   BEGIN answers a processed duplicate (or a 422 reuse): with option `redis` one Redis GET
 *   (bounded by `redisTimeoutMs`) = 0 round trips, without it one primary-key read = 1; every
 *   other delivery pays that look, then exactly the rows here. While duplicates are rare
 *   nothing is looked up first, and a new event costs Redis nothing.
 * - with option `redis`, one Redis SET the response does not wait for: after a COMMIT as
 *   processed while duplicates are likely, and after any duplicate Postgres answered (so the
 *   next copies find it there).
 * - handler throws: [BEGIN + claim + SAVEPOINT], <handler>, [ROLLBACK TO SAVEPOINT + the event
 *   waiting again + `fail` + COMMIT] = the handler's + 2, the event locked until COMMIT.
 * - held events a delivery's commit makes runnable (inline mode), applied in its transaction
 *   after its handler, up to `DRAIN_IN_TRANSACTION` (src/background/drain.ts): each costs
 *   [the previous result + take_next + SAVEPOINT], <handler>, its own result riding on the next
 *   take or on COMMIT = its handler's + 1; a gap-filler that drains k events costs the handlers'
 *   + 2 + k. A stored event's take (take_next, take_turn, take_pending) locks its row but leaves
 *   it waiting: "result" is then one UPDATE that marks it processed with its result, sent even
 *   without a result (src/sql/mark-applied.ts).
 * - each held event left (past the bound, or behind a poison event skipped) drained after the
 *   response, on the delivery's own connection: [BEGIN + take_next + SAVEPOINT], <handler>,
 *   [result + COMMIT] = its handler's + 2.
 * - deferred mode: [claim] = 1, whatever it decides (pending, held, duplicate, mismatch, …): it
 *   applies nothing, so it is a READ COMMITTED transaction of its own (`SET TRANSACTION` rides
 *   on it, src/drivers/fold.ts), committed inside PostgreSQL before its answer comes back: its
 *   NOTIFY is sent there, and its locks (the key's, the id's) are not held while the answer
 *   travels and COMMIT follows (the 50 senders of one key queued behind that round trip). With a Kysely instance
 *   of the user's, whose driver would run it at the server's default isolation: BEGIN, claim,
 *   COMMIT. Then a worker applies it:
 *   - an ordered key's event: [BEGIN + take_turn + SAVEPOINT], <handler>, [advance],
 *     [result + COMMIT] = the handler's + 3 (advance: the price of not holding the key meanwhile);
 *   - unordered events, n in one transaction (n = `workerBatchSize` while every lane is busy,
 *     else 1; src/background/workers.ts): [BEGIN + take_pending + SAVEPOINT], then for each
 *     event <handler> and [its result + the next event's SAVEPOINT], the last one's result
 *     riding on COMMIT = n × (the handler's + 1) + 1: per event the handler's + 1 + 1/n, never
 *     more than inline's handler's + 2 (n = 1). A handler that throws in a batch: [ROLLBACK TO
 *     SAVEPOINT + the event waiting again + `fail`] ride on the next SAVEPOINT (or COMMIT) in
 *     its result's place, at the same count.
 * - shed (maxInFlight, maxPending): 0, answered before touching the database.
 * On a pg pool the folds are pipelines (src/drivers/pipeline.ts): their values are bound as
 * parameters, whatever their size, and each statement is parsed in the first pipeline that
 * needs it, on no round trip of its own. Folded as text (PGlite, a pg-shaped wrapper), values
 * too large to write as literals (over 64 KiB, e.g. a big held payload, or a new event's
 * payload kept with `keepPayload`) travel as parameters instead: BEGIN (or COMMIT) then goes
 * alone, one round trip more; and once in each connection's life (not per delivery), one round
 * trip PREPAREs the folded statements. A deferred claim alone is text on every driver (its
 * SET TRANSACTION needs the simple protocol's implicit transaction): over 64 KiB it is BEGIN,
 * claim, COMMIT = 3.
 * On PGlite the same folds hold, counted as calls into the embedded database (each has a fixed
 * cost of its own; src/drivers/fold.ts).
 */
import type { Context, Span } from '@opentelemetry/api';
import type { Kysely } from 'kysely';
import { applyOne } from '../apply.js';
import type { Background } from '../background/background.js';
import { DrainInTransaction } from '../background/drain.js';
import { notifyDeadLetter } from '../dead-letter-hook.js';
import { InvalidDeliveryError } from '../errors.js';
import { silent } from '../logger.js';
import { type Outcome, OutcomeKind } from '../outcome.js';
import { parseBody, storableHeaders } from '../payload.js';
import { type CachedEvent, mismatchOf } from '../processed-cache.js';
import type { RedisCache } from '../redis-cache.js';
import type { Runtime } from '../runtime.js';
import type { ClaimRow } from '../sql/claim.js';
import type { ClaimLatestRow } from '../sql/claim-latest.js';
import type { TakenEvent } from '../sql/taken-event.js';
import { inActiveSpan, inSpan, parentOf, recordError, SpanAttributes } from '../tracing.js';
import { type ParsedDelivery, parseDelivery } from './delivery.js';
import { type BodyStream, startBodyRead } from './raw-body.js';
import type { Delivery } from './request.js';
import * as respond from './respond.js';
import { shapeOutcome } from './respond-hook.js';
import { type VerifiedDelivery, verifyDelivery } from './verify.js';

/** What one delivery's telemetry needs to know besides its outcome. */
interface Observation {
  /** Parent of the child spans, when the delivery's span records. */
  readonly parent: Context | undefined;
  parsed?: ParsedDelivery;
  answeredBy?: 'memory' | 'redis' | 'postgres';
}

/** Who waits for the deliveries in flight to settle (`inbox.close()`), per runtime. */
const settleWaiters = new WeakMap<Runtime, Array<() => void>>();

/**
 * Resolves when no delivery is in flight (admitted and not yet answered). `inbox.close()`
 * waits for it before it closes the database, so that a shutdown never fails a delivery it
 * had taken: each one is bounded by `handlerTimeoutMs` and `lockTimeoutMs`.
 */
export function deliveriesSettled(rt: Runtime): Promise<void> {
  if (rt.inFlight === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const waiters = settleWaiters.get(rt) ?? [];
    waiters.push(resolve);
    settleWaiters.set(rt, waiters);
  });
}

/**
 * Sheds the delivery when `maxInFlight` are being received (a counter, no I/O, before the rest
 * of the body is read: reading it is work), or when the inbox is closing, else runs `receive`
 * under the count.
 */
async function admitted(rt: Runtime, receive: () => Promise<Outcome>): Promise<Outcome> {
  if (rt.closing) return observed(rt, undefined, { parent: undefined }, respond.shed('closing'));
  if (rt.inFlight >= rt.options.maxInFlight) {
    return observed(rt, undefined, { parent: undefined }, respond.shed('in-flight'));
  }
  rt.inFlight++;
  try {
    return await receive();
  } finally {
    rt.inFlight--;
    if (rt.inFlight === 0) {
      const waiters = settleWaiters.get(rt);
      settleWaiters.delete(rt);
      for (const resolve of waiters ?? []) resolve();
    }
  }
}

/**
 * A delivery whose body is still a stream (what the adapters have): read it, bounded by
 * `maxBodyBytes` and `bodyTimeoutMs`. The first bytes are awaited before the delivery counts
 * as in flight: a sender that opens a request and sends nothing holds no slot (its wait is
 * bounded by `bodyTimeoutMs`, then 408).
 */
export async function receiveStream(
  rt: Runtime,
  bg: Background,
  headers: Delivery['headers'],
  stream: BodyStream,
): Promise<Outcome> {
  const length = headers['content-length'];
  const reading = startBodyRead(stream, {
    maxBytes: rt.options.maxBodyBytes,
    timeoutMs: rt.options.bodyTimeoutMs,
    declaredLength: typeof length === 'string' ? length : length?.[0],
  });
  await reading.started;
  return admitted(rt, async () => {
    let rawBody: Buffer;
    try {
      rawBody = await reading.body;
    } catch (err) {
      if (err instanceof InvalidDeliveryError)
        return observed(rt, undefined, { parent: undefined }, respond.invalid(err));
      throw err;
    }
    return traced(rt, bg, { headers, rawBody });
  });
}

/** Turns one delivery into its outcome. Never throws for a bad delivery. */
export function receive(rt: Runtime, bg: Background, delivery: Delivery): Promise<Outcome> {
  return admitted(rt, () => traced(rt, bg, delivery));
}

function traced(rt: Runtime, bg: Background, delivery: Delivery): Promise<Outcome> {
  return inActiveSpan(rt.tracer, 'webhook-inbox.receive', async (span) => {
    const obs: Observation = { parent: parentOf(span) };
    try {
      return observed(rt, span, obs, await decide(rt, bg, delivery, obs));
    } catch (err) {
      recordError(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

async function decide(rt: Runtime, bg: Background, delivery: Delivery, obs: Observation): Promise<Outcome> {
  const o = rt.options;
  let verified: VerifiedDelivery | undefined;
  if (o.verify) {
    // Before anything is parsed, looked up (the duplicate cache included) or stored: a
    // delivery that fails costs no round trip and learns nothing about stored events.
    try {
      verified = await verifyDelivery(o.verify, delivery);
    } catch (err) {
      return respond.unverified(o, err);
    }
  }
  // Without a `respond` hook or `bodySchema`, an answer from the in-process cache needs no body:
  // a copy whose bytes are known to parse as JSON is not parsed again (processed-cache.ts).
  const bodyLater = !o.bodySchema && !o.respond;
  let d: ParsedDelivery;
  try {
    d = parseDelivery(delivery, o, verified?.id, bodyLater ? rt.processed : undefined);
    // At the door: a body that fails the schema is 422 before anything is looked up or stored.
    if (o.bodySchema) d = { ...d, body: await o.bodySchema.check(d.body) };
  } catch (err) {
    if (err instanceof InvalidDeliveryError) return respond.invalid(err);
    throw err;
  }
  obs.parsed = d;
  const cached = rt.processed.duplicateOf(d.id, d.hash, d.key, d.seq);
  if (cached) {
    // This copy parsed as JSON, and so will the next ones (same bytes): they are not parsed.
    if (bodyLater && d.body !== undefined && !Buffer.isBuffer(d.body)) rt.processed.noteBodyParses(cached);
    obs.answeredBy = 'memory';
    return respond.duplicate(d.id, cached.result); // zero round trips: see processed-cache.ts
  }
  if (d.body === undefined) {
    // Known to parse, but the cache did not answer (another key or seq): the rest needs the body.
    d = { ...d, body: parseBody(d.rawBody, d.headers['content-type'], o.parse) };
    obs.parsed = d;
  }
  try {
    await rt.open();
    bg.start();
  } catch (err) {
    o.logger.error({ err }, 'webhook-inbox: database unavailable');
    return respond.unavailable();
  }
  if (rt.duplicateOdds.likely) {
    // A retry storm (most recent deliveries were duplicates): look before any transaction. With
    // Redis one GET answers a duplicate that any instance processed; without it, one
    // primary-key read. While duplicates are rare neither is sent (duplicate-odds.ts).
    const found = rt.redis ? await lookUpRedis(rt.redis, d.id) : await readProcessed(rt, o.source, d.id);
    if (found) {
      obs.answeredBy = rt.redis ? 'redis' : 'postgres';
      rt.duplicateOdds.note(true);
      return fromProcessed(rt, d, found);
    }
  }
  // Deferred mode: a bound on pending events, against the workers' estimate (no query).
  if (bg.sheddingPending && rt.pendingEstimate >= o.maxPending) return respond.shed('pending');
  obs.answeredBy = 'postgres';
  return claimAndApply(rt, bg, d, obs);
}

/** A processed event from one Redis GET; undefined on a miss, an error or a timeout (the claim decides). */
async function lookUpRedis(redis: RedisCache, id: string): Promise<CachedEvent | undefined> {
  const found = await redis.lookup(id);
  return found.hit ? found.event : undefined;
}

/** A processed event from one primary-key read before BEGIN; undefined otherwise (the claim decides). */
function readProcessed(rt: Runtime, source: string, id: string): Promise<CachedEvent | undefined> {
  return rt.statements.findProcessed(rt.database.kysely, source, id).catch(() => undefined);
}

/**
 * Answers from a processed event (a Redis entry, or the row read before BEGIN) exactly as the
 * claim would: the same comparisons in the same order (body, then key, then seq), the same
 * responses.
 */
function fromProcessed(rt: Runtime, d: ParsedDelivery, e: CachedEvent): Outcome {
  const reason = mismatchOf(e, d);
  if (!reason) {
    rt.processed.remember(d.id, d.hash, d.key, d.seq, JSON.stringify(e.result));
    return respond.duplicate(d.id, e.result);
  }
  return respond.decided(rt.options, d, {
    decision: 'mismatch',
    result: null,
    reason,
    expected: null,
    attempts: 0,
    drain: false,
    receivedAt: new Date(),
  });
}

/**
 * The claim and, when it says "apply", the handler: one transaction (src/apply.ts).
 *
 * An ordered delivery in inline mode applies the held events its claim made runnable in its
 * own transaction, up to a bound (`claimAndApplyOn`), and keeps its connection after COMMIT:
 * when events are left, it drains them on that connection right after the response, instead
 * of queueing for the pool again behind every delivery that arrived meanwhile (under load that
 * queue was most of a held event's wait).
 */
function claimAndApply(rt: Runtime, bg: Background, d: ParsedDelivery, obs: Observation): Promise<Outcome> {
  if (d.latest) return claimLatestAndApply(rt, d, d.latest, obs);
  const key = d.key;
  if (key === null || rt.options.mode === 'deferred') {
    return claimAndApplyOn(rt, bg, d, obs, undefined).then((settled) => settled.outcome);
  }
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
  let claimedAt = 0;
  let applied: Awaited<ReturnType<typeof applyOne<{ claim: ClaimLatestRow; event?: TakenEvent }>>>;
  try {
    applied = await applyOne(rt, {
      take: async (tx) => {
        claimedAt = performance.now();
        const claim = await inSpan(rt.tracer, 'webhook-inbox.claim', obs.parent, () =>
          rt.statements.claimLatest(tx, {
            source: o.source,
            id: d.id,
            key: latest.key,
            version: latest.version,
            hash: d.hash,
            lockTimeout: claimLockTimeout(rt),
          }),
        );
        if (claim.decision !== 'apply') return { claim };
        // To the rest of the inbox a latest-wins event is unordered: no key, no seq.
        return { claim, event: taken({ ...d, key: null, seq: null }, claim) };
      },
      parent: obs.parent,
    });
  } catch (err) {
    return respond.infrastructureFailure(o, err);
  }
  const claim = applied.took.claim;
  if (applied.status === 'failed') {
    const failure = applied.failure;
    if (failure?.decision === 'snoozed') return respond.snoozed(d.id, failure.error.at);
    if (failure?.decision !== 'dead') return respond.handlerFailed(d.id);
    return failure.reason === 'rejected' ? respond.rejected(o, d.id) : respond.deadLettered(d.id, 'poison');
  }
  rt.metrics.claimToCommit((performance.now() - claimedAt) / 1000);
  if (applied.status === 'applied') return appliedOutcome(d, applied);
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
  const deferred = o.mode === 'deferred';
  // Only an ordered event can be held (and so need its payload later) in this claim; in
  // deferred mode every event may be stored as pending. A new unordered event's row is written
  // at COMMIT (its payload then too, with keepPayload), not by the claim.
  const store = deferred || ordered;
  let claimedAt = 0;
  let applied: Awaited<ReturnType<typeof applyOne<{ claim: ClaimRow; event?: TakenEvent }>>>;
  // Inline mode: when the claim says the next seq waits, the held events this delivery's commit
  // would make runnable are applied in its transaction, after its handler, up to a bound
  // (src/background/drain.ts); `drain` after the response is then what is left.
  let drain: DrainInTransaction | undefined;
  let committed = false;
  try {
    applied = await applyOne(rt, {
      take: async (tx) => {
        claimedAt = performance.now();
        const claim = await inSpan(rt.tracer, 'webhook-inbox.claim', obs.parent, () =>
          rt.statements.claim(tx, {
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
          }),
        );
        if (claim.decision !== 'apply') return { claim };
        if (claim.drain && ordered && !deferred) drain = new DrainInTransaction(rt, d.key!, obs.parent);
        return { claim, event: taken(d, claim) };
      },
      next:
        ordered && !deferred ? (tx, last) => drain?.next(tx, last) ?? Promise.resolve(undefined) : undefined,
      parent: obs.parent,
      db,
      alone: deferred,
    });
    committed = true;
  } catch (err) {
    return { outcome: respond.infrastructureFailure(o, err), drain: false };
  } finally {
    drain?.end(committed);
  }
  const claim = applied.took.claim;
  rt.duplicateOdds.note(claim.decision === 'duplicate');
  if (applied.status === 'failed') {
    const failure = applied.failure;
    if (failure?.decision === 'snoozed')
      return { outcome: respond.snoozed(d.id, failure.error.at), drain: false };
    if (failure?.decision !== 'dead') return { outcome: respond.handlerFailed(d.id), drain: false };
    // onPoison 'skip' moved the cursor past it: what waits behind it may run now.
    if (failure.reason === 'rejected') return { outcome: respond.rejected(o, d.id), drain: failure.drain };
    return { outcome: respond.deadLettered(d.id, 'poison'), drain: failure.drain };
  }
  // Committed.
  rt.metrics.claimToCommit((performance.now() - claimedAt) / 1000);
  if (applied.status === 'applied')
    return { outcome: appliedOutcome(d, applied), drain: drain?.rest ?? claim.drain };
  if (claim.decision === 'dead' && claim.reason === 'late') {
    // Counted per late delivery: a redelivery of a late event (rare: it was answered 200) counts again.
    rt.metrics.deadLetter('late');
    o.logger.info(
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
  return { outcome: respond.decided(o, d, claim), drain: claim.drain };
}

/** The answer to a delivery applied now: processed, or ignored when no handler takes its type. */
function appliedOutcome(d: ParsedDelivery, run: { ignored: boolean; result: unknown }): Outcome {
  return run.ignored ? respond.ignored(d.id, d.type) : respond.processed(d.id, run.result);
}

/** The `respond` hook's shape of one delivery's outcome; its metrics, span attributes and debug log line. */
function observed(rt: Runtime, span: Span | undefined, obs: Observation, decided: Outcome): Outcome {
  const o = rt.options;
  const d = obs.parsed;
  // The `respond` hook shapes the answer last, after every decision; what is observed is what
  // the sender receives (the kind stays the inbox's).
  const outcome = o.respond ? shapeOutcome(o.respond, o.logger, decided, d) : decided;
  rt.metrics.delivery(outcome.kind);
  const answeredBy = outcome.kind === OutcomeKind.duplicate ? (obs.answeredBy ?? 'postgres') : undefined;
  if (answeredBy) rt.metrics.duplicate(answeredBy);
  if (obs.parent && span) {
    span.setAttributes({
      [SpanAttributes.source]: o.source,
      [SpanAttributes.outcome]: outcome.kind,
      [SpanAttributes.statusCode]: outcome.status,
      [SpanAttributes.keyPresent]: d ? d.key !== null : false,
    });
    if (d) span.setAttribute(SpanAttributes.eventId, d.id);
    if (d?.seq != null) span.setAttribute(SpanAttributes.seq, d.seq);
    if (answeredBy) span.setAttribute(SpanAttributes.answeredBy, answeredBy);
    if (outcome.status >= 500) recordError(span, undefined);
  }
  // Without a logger (or one without `debug`), no line object is built for nobody.
  if (o.logger.debug === silent) return outcome;
  o.logger.debug(
    {
      source: o.source,
      id: d?.id,
      key: d?.key,
      seq: d?.seq,
      outcome: outcome.kind,
      status: outcome.status,
      answeredBy,
    },
    'webhook-inbox: delivery',
  );
  return outcome;
}
