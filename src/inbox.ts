/**
 * The inbox: one framework-free state machine, `receive(delivery) → outcome`.
 *
 * Round trips to Postgres per delivery (the hot path; a change that adds one says why):
 * - unique event, applied now (unordered, or ordered and its turn):
 *   BEGIN, claim, <the handler's own statements>, [store result], COMMIT
 *   = the handler's + 3, and + 1 only when the handler returns a result to replay.
 * - duplicate this instance saw processed (bounded LRU, `duplicateCacheSize`): 0.
 * - with option `redis`, a duplicate (or a 422 reuse) of an event any instance processed,
 *   found by one Redis GET (before BEGIN, bounded by `redisTimeoutMs`): 0. Every other
 *   delivery pays that GET and then exactly the rows here; a miss, error or timeout too.
 *   After a COMMIT as processed, one Redis SET that the response does not wait for.
 * - other duplicate, held, late, mismatch, buffer-full: BEGIN, claim, COMMIT = 3.
 * - handler throws: BEGIN, claim, <handler>, ROLLBACK, then `fail` (autocommit) = + 1.
 * - each held event drained after the response: BEGIN, take_next, <handler>, [result], COMMIT.
 * - deferred mode: BEGIN, claim (stored as pending; its NOTIFY rides on the COMMIT), COMMIT = 3,
 *   then a worker: BEGIN, take_pending | take_turn, <handler>, [result], [advance], COMMIT.
 * - shed (maxInFlight, maxPending): 0, answered before touching the database.
 * The claim decides everything in one statement (a PL/pgSQL function shipped by the
 * migrations) because the whole transaction rolls back if the handler throws: the event row
 * is inserted already as processed and the cursor already advanced.
 */
import type { Context, Span, Tracer } from '@opentelemetry/api';
import type { Kysely } from 'kysely';
import { connectRedis, DuplicateCache } from './cache.js';
import { type Database, openDatabase } from './database.js';
import { type Delivery, type ParsedDelivery, parseBody, parseDelivery, storableHeaders } from './delivery.js';
import {
  HandlerError,
  InvalidDeliveryError,
  PoolWaitTimeoutError,
  RawBodyUnavailableError,
  UnauthorizedDeliveryError,
} from './errors.js';
import type { InboxEvent } from './event.js';
import { runHandler } from './handler-context.js';
import { type CachedEvent, ProcessedCache } from './local-cache.js';
import { createMetrics, type InboxMetrics, type InboxStats, noMetrics } from './metrics.js';
import { migrateToLatest } from './migrations.js';
import {
  type DeadLetter,
  type DeadLetterFilter,
  type InboxStatus,
  type KeySummary,
  Operations,
  type PruneOptions,
  type PruneResult,
  type ReplayResult,
  type ReplaySelection,
  type SkipResult,
} from './operations/index.js';
import { type InboxOptions, type ResolvedOptions, resolveOptions } from './options.js';
import { type Outcome, OutcomeKind, ok, problem } from './outcome.js';
import { type BodyStream, readRawBody } from './raw-body.js';
import { type ClaimRow, createClaim } from './sql/claim.js';
import {
  createAdvance,
  createCountPending,
  createTakePending,
  createTakeTurn,
  type PendingEvent,
} from './sql/deferred.js';
import { createTakeNext, type TakenEvent } from './sql/drain.js';
import { createFail } from './sql/fail.js';
import { createStoreResult } from './sql/finalize.js';
import { type KeyState, keyState, listEvents, type StoredEvent } from './sql/inspect.js';
import { createStats } from './sql/stats.js';
import { createSweep, type SweepRow } from './sql/sweep.js';
import { createTables, type Tables } from './sql/tables.js';
import { createTracer, inSpan, parentOf, recordError, SpanAttributes } from './tracing.js';
import { type VerifiedDelivery, verifyDelivery } from './verify.js';
import { Workers } from './worker.js';

/** SQLSTATEs that mean "someone else holds this id or key right now": answer 409, retry later. */
// 23505: two deliveries of one id under different keys raced past the claim's existence
// check (each key has its own lock); the loser's retry then sees the row and answers 422.
const CONTENDED = new Set(['55P03', '40P01', '40001', '23505']);

function sqlState(err: unknown): string | undefined {
  return err && typeof err === 'object' && 'code' in err && typeof err.code === 'string'
    ? err.code
    : undefined;
}

function errorMessage(err: unknown): string {
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return message.slice(0, 2000);
}

/** Capped exponential backoff with full jitter (the AWS architecture blog's "full jitter"). */
export function backoffMs(previousAttempts: number, baseMs: number, capMs: number): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(previousAttempts, 30));
  return Math.floor(Math.random() * ceiling);
}

interface Statements {
  claim: ReturnType<typeof createClaim>;
  storeResult: ReturnType<typeof createStoreResult>;
  fail: ReturnType<typeof createFail>;
  takeNext: ReturnType<typeof createTakeNext>;
  takePending: ReturnType<typeof createTakePending>;
  sweep: ReturnType<typeof createSweep>;
  stats: ReturnType<typeof createStats>;
  countPending: ReturnType<typeof createCountPending>;
  takeTurn: ReturnType<typeof createTakeTurn>;
  advance: ReturnType<typeof createAdvance>;
}

/** What one delivery's telemetry needs to know besides its outcome. */
interface Observation {
  /** Parent of the child spans, when the delivery's span records. */
  readonly parent: Context | undefined;
  parsed?: ParsedDelivery;
  answeredBy?: 'memory' | 'redis' | 'postgres';
}

/** `inbox.health()`: can this instance take deliveries, and what waits for an operator. */
export interface InboxHealth {
  /** false when Postgres does not answer; a Redis outage alone only degrades (`redis: 'down'`). */
  ok: boolean;
  postgres: 'up' | 'down';
  redis: 'up' | 'down' | 'disabled';
  /** Events held for an earlier seq (null when Postgres is down). */
  held: number | null;
  oldestHeldAgeMs: number | null;
  blockedKeys: number | null;
  deadLetters: number | null;
}

/**
 * Redis entries live as long as processed rows do (`retention`); with pruning off, 7 days:
 * past that, Postgres (which still has the row) answers.
 */
const REDIS_TTL_WITHOUT_RETENTION_MS = 7 * 86_400_000;
/** `health()` answers within about this long, whatever is hanging. */
const HEALTH_TIMEOUT_MS = 2000;

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Retention: rows per prune batch, and how often the sweeper prunes while it is caught up. */
const PRUNE_BATCH = 1000;
const PRUNE_EVERY_MS = 60_000;
/** Unordered pending events one sweeper pass applies at most. */
const PENDING_PER_SWEEP = 100;
const SHORT_RETENTION_MS = 3 * 86_400_000;
let warnedShortRetention = false;

/** What one sweeper pass did. */
export interface SweepReport {
  drained: number;
  gapsSkipped: number;
  keysBlocked: number;
  /** Unordered pending events applied (replayed dead letters, inline runs that failed). */
  applied: number;
  /** Processed rows pruned by retention. */
  pruned: number;
}

export class Inbox {
  /** The options, checked and defaulted. */
  readonly options: ResolvedOptions;
  readonly tables: Tables;
  readonly #lockTimeout: string;
  #database: Promise<Database> | undefined;
  #statements: Statements | undefined;
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping: Promise<unknown> | undefined;
  readonly #background = new Set<Promise<unknown>>();
  #closing = false;
  #warnedRawBody = false;
  #workers: Workers | undefined;
  /** Deliveries being received now, for `maxInFlight`. */
  #inFlight = 0;
  readonly #processed: ProcessedCache;
  readonly #tracer: Tracer;
  #metrics: InboxMetrics = noMetrics;
  #detachMetrics: (() => void) | undefined;
  #redis: DuplicateCache | undefined;
  #telemetry: Promise<void> | undefined;
  #operations: Operations | undefined;
  /** When the sweeper prunes next (0: on its next pass). */
  #nextPruneAt = 0;

  constructor(options: InboxOptions) {
    this.options = resolveOptions(options);
    this.tables = createTables(this.options.schema, this.options.tablePrefix);
    this.#lockTimeout = `${this.options.lockTimeoutMs}ms`;
    this.#processed = new ProcessedCache(this.options.duplicateCacheSize);
    this.#tracer = createTracer(this.options.tracerProvider);
    const { retention } = this.options;
    if (retention !== false && retention < SHORT_RETENTION_MS) {
      const message =
        `webhook-inbox: retention is ${retention} ms, shorter than 3 days: senders that retry for longer ` +
        '(Stripe retries for 3 days) can redeliver an unordered event after its row was pruned, and it would be applied again';
      this.options.logger.warn({ retention, source: this.options.source }, message);
      if (!warnedShortRetention) {
        warnedShortRetention = true;
        process.emitWarning(message, 'WebhookInboxWarning');
      }
    }
  }

  /** Opens the database, runs migrations (unless `migrate: false`) and starts the sweeper. Idempotent. */
  ready(): Promise<Database> {
    // A failed open is not kept: a database that was down at the first delivery must not
    // leave the inbox answering 503 after it is back.
    this.#database ??= this.#open().catch((err) => {
      this.#database = undefined;
      throw err;
    });
    return this.#database;
  }

  /** Metrics and the Redis client: set up once, even when opening the database is retried. */
  #setUpTelemetry(): Promise<void> {
    this.#telemetry ??= (async () => {
      const o = this.options;
      if (o.metrics) {
        const { metrics, detach } = await createMetrics(o.metrics.registry, o.source, () => this.#stats());
        this.#metrics = metrics;
        this.#detachMetrics = detach;
      }
      if (o.redis !== undefined) {
        const owned = typeof o.redis === 'string';
        const client = owned ? await connectRedis(o.redis as string, o.logger) : (o.redis as any);
        const metrics = this.#metrics;
        this.#redis = new DuplicateCache(
          client,
          {
            prefix: o.redisPrefix,
            source: o.source,
            timeoutMs: o.redisTimeoutMs,
            ttlMs: o.retention === false ? REDIS_TTL_WITHOUT_RETENTION_MS : o.retention,
            owned,
          },
          {
            fallback: (reason) => metrics.redisFallback(reason),
            writeError: () => metrics.redisWriteError(),
          },
        );
      }
    })();
    return this.#telemetry;
  }

  async #open(): Promise<Database> {
    await this.#setUpTelemetry();
    const database = await openDatabase(this.options.db, {
      dataDir: this.options.dataDir,
      poolSize: this.options.poolSize,
      poolWaitTimeoutMs: this.options.poolWaitTimeoutMs,
    });
    try {
      if (this.options.migrate) await migrateToLatest(database.kysely, this.tables);
    } catch (err) {
      await database.destroy().catch(() => {});
      throw err;
    }
    const { names } = database;
    this.#statements = {
      claim: createClaim(names, this.tables),
      storeResult: createStoreResult(names, this.tables),
      fail: createFail(names, this.tables),
      takeNext: createTakeNext(names, this.tables),
      takePending: createTakePending(names, this.tables),
      sweep: createSweep(names, this.tables),
      stats: createStats(names, this.tables),
      countPending: createCountPending(names, this.tables),
      takeTurn: createTakeTurn(names, this.tables),
      advance: createAdvance(names, this.tables),
    };
    this.#operations = new Operations(database.kysely, this.tables, this.options.source);
    if (this.options.sweepIntervalMs > 0 && !this.#closing) this.#scheduleSweep();
    if ((this.options.mode === 'deferred' || this.options.workers > 0) && !this.#closing) {
      const s = this.#statements;
      this.#workers = new Workers({
        options: this.options,
        tables: this.tables,
        database,
        takePending: s.takePending,
        countPending: s.countPending,
        takeTurn: s.takeTurn,
        advance: s.advance,
        fail: s.fail,
        runHandler: (tx, event) => this.#runHandler(tx, event, undefined),
        retryInMs: (attempts) => backoffMs(attempts, this.options.retryBaseMs, this.options.retryCapMs),
        errorMessage,
      });
      this.#workers.start();
    }
    return database;
  }

  /** The Kysely instance the inbox uses: create your own tables in the same database with it. */
  async kysely(): Promise<Kysely<any>> {
    return (await this.ready()).kysely;
  }

  /** Runs the shipped migrations now (also done on first use unless `migrate: false`). */
  async migrate(): Promise<void> {
    const database = await this.ready();
    if (!this.options.migrate) await migrateToLatest(database.kysely, this.tables);
  }

  /**
   * Reads a request body from a Node stream (bounded by `maxBodyBytes`), then receives it.
   * This is what the adapters call.
   */
  async receiveStream(headers: Delivery['headers'], stream: BodyStream): Promise<Outcome> {
    // Shed before reading the body, too: reading it is work.
    if (this.#inFlight >= this.options.maxInFlight) return this.#shed('in-flight');
    this.#inFlight++;
    try {
      return await this.#receiveStream(headers, stream);
    } finally {
      this.#inFlight--;
    }
  }

  async #receiveStream(headers: Delivery['headers'], stream: BodyStream): Promise<Outcome> {
    let rawBody: Buffer;
    try {
      const length = headers['content-length'];
      rawBody = await readRawBody(
        stream,
        this.options.maxBodyBytes,
        typeof length === 'string' ? length : undefined,
      );
    } catch (err) {
      if (err instanceof InvalidDeliveryError) {
        const outcome = invalid(err);
        this.#observe(undefined, { parent: undefined }, outcome);
        return outcome;
      }
      throw err;
    }
    return this.#traced({ headers, rawBody });
  }

  /** Turns one delivery into its outcome (DESIGN.md §1). Never throws for a bad delivery. */
  async receive(delivery: Delivery): Promise<Outcome> {
    // Load shedding happens here, before the database is touched: a counter, no I/O.
    if (this.#inFlight >= this.options.maxInFlight) return this.#shed('in-flight');
    this.#inFlight++;
    try {
      return await this.#traced(delivery);
    } finally {
      this.#inFlight--;
    }
  }

  #shed(reason: 'in-flight' | 'pending'): Outcome {
    const outcome = shed(reason);
    this.#observe(undefined, { parent: undefined }, outcome);
    return outcome;
  }

  #traced(delivery: Delivery): Promise<Outcome> {
    return this.#tracer.startActiveSpan('webhook-inbox.receive', async (span) => {
      const obs: Observation = { parent: parentOf(span) };
      try {
        const outcome = await this.#receive(delivery, obs);
        this.#observe(span, obs, outcome);
        return outcome;
      } catch (err) {
        recordError(span, err);
        throw err;
      } finally {
        span.end();
      }
    });
  }

  async #receive(delivery: Delivery, obs: Observation): Promise<Outcome> {
    let verified: VerifiedDelivery | undefined;
    if (this.options.verify) {
      // Before anything is parsed, looked up (the duplicate cache included) or stored: a
      // delivery that fails costs no round trip and learns nothing about stored events.
      try {
        verified = await verifyDelivery(this.options.verify, delivery);
      } catch (err) {
        return this.#unverified(err);
      }
    }
    let parsed: ParsedDelivery;
    try {
      parsed = parseDelivery(delivery, this.options, undefined, verified?.id);
    } catch (err) {
      if (err instanceof InvalidDeliveryError) return invalid(err);
      throw err;
    }
    obs.parsed = parsed;
    const cached = this.#processed.duplicateOf(parsed.id, parsed.hash, parsed.key, parsed.seq);
    if (cached) {
      obs.answeredBy = 'memory';
      return duplicate(parsed.id, cached.result); // zero round trips: see local-cache.ts
    }
    let database: Database;
    try {
      database = await this.ready();
    } catch (err) {
      this.options.logger.error({ err }, 'webhook-inbox: database unavailable');
      return unavailable();
    }
    if (this.#redis) {
      // One GET, before any Postgres round trip: a duplicate of an event that any instance
      // processed is answered here.
      const found = await this.#redis.lookup(parsed.id);
      if (found.hit) {
        obs.answeredBy = 'redis';
        return this.#fromRedis(parsed, found.event);
      }
    }
    // Deferred mode: a bound on pending events, against the workers' cached count (no query).
    if (this.#workers && this.options.mode === 'deferred') {
      if (this.#workers.pendingEstimate >= this.options.maxPending) return shed('pending');
    }
    obs.answeredBy = 'postgres';
    return this.#apply(database, parsed, obs);
  }

  /**
   * Answers from a Redis entry exactly as the claim would from the processed row: the same
   * comparisons in the same order (body, then key, then seq), the same responses.
   */
  #fromRedis(d: ParsedDelivery, e: CachedEvent): Outcome {
    const reason = e.hash !== d.hash ? 'body' : e.key !== d.key ? 'key' : e.seq !== d.seq ? 'seq' : null;
    if (!reason) this.#processed.remember(d.id, d.hash, d.key, d.seq, JSON.stringify(e.result));
    return this.#decided(d, {
      decision: reason ? 'mismatch' : 'duplicate',
      result: reason ? null : e.result,
      reason,
      expected: null,
      attempts: 0,
      drain: false,
      receivedAt: new Date(),
    });
  }

  /** Metrics, span attributes and the debug log line of one delivery's outcome. */
  #observe(span: Span | undefined, obs: Observation, outcome: Outcome): void {
    const o = this.options;
    const d = obs.parsed;
    this.#metrics.delivery(outcome.kind);
    const answeredBy = outcome.kind === OutcomeKind.duplicate ? (obs.answeredBy ?? 'postgres') : undefined;
    if (answeredBy) this.#metrics.duplicate(answeredBy);
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
  }

  async #apply(database: Database, d: ParsedDelivery, obs: Observation): Promise<Outcome> {
    const o = this.options;
    const s = this.#statements!;
    const ordered = d.key !== null;
    const deferred = o.mode === 'deferred';
    let claimed: ClaimRow | undefined;
    let resultJson: string | undefined;
    let claimedAt = 0;
    try {
      const outcome = await database.kysely.transaction().execute(async (tx) => {
        claimedAt = performance.now();
        claimed = await inSpan(this.#tracer, 'webhook-inbox.claim', obs.parent, () =>
          s.claim(tx, {
            source: o.source,
            id: d.id,
            key: d.key,
            seq: d.seq,
            hash: d.hash,
            // Only an ordered event can be held (and so need its payload later) in this claim;
            // in deferred mode every event may be stored as pending.
            payload: deferred || ordered || o.keepPayload ? d.rawBody : null,
            headers: deferred || ordered || o.keepPayload ? storableHeaders(d.headers) : null,
            apply: !deferred,
            keepPayload: o.keepPayload,
            firstSeen: o.firstSeq === 'first-seen',
            maxHeld: o.maxHeldPerKey,
            maxAhead: o.maxSeqAhead,
            lockTimeout: this.#lockTimeout,
          }),
        );
        if (claimed.decision !== 'apply') return this.#decided(d, claimed);
        const event: InboxEvent = {
          id: d.id,
          source: o.source,
          key: d.key,
          seq: d.seq,
          body: d.body,
          rawBody: d.rawBody,
          headers: d.headers,
          attempt: claimed.attempts + 1,
          receivedAt: claimed.receivedAt,
        };
        const { result, json } = await this.#runHandler(tx, event, obs.parent);
        resultJson = json;
        return ok(OutcomeKind.processed, 200, { status: 'processed', id: d.id, result: result ?? null });
      });
      // Committed. Only now may the event be remembered as processed.
      this.#metrics.claimToCommit((performance.now() - claimedAt) / 1000);
      if (outcome.kind === OutcomeKind.processed) {
        this.#processed.remember(d.id, d.hash, d.key, d.seq, resultJson);
        this.#rememberInRedis(d.id, d.hash, d.key, d.seq, resultJson);
      } else if (claimed?.decision === 'dead' && claimed.reason === 'late') {
        // Counted per late delivery: a redelivery of a late event (rare: it was answered 200) counts again.
        this.#metrics.deadLetter('late');
        o.logger.info(
          { id: d.id, key: d.key, seq: d.seq, source: o.source },
          'webhook-inbox: dead-lettered (late: its seq was skipped by a gap timeout)',
        );
      } else if (outcome.kind === OutcomeKind.duplicate && claimed) {
        this.#processed.remember(
          d.id,
          d.hash,
          d.key,
          d.seq,
          claimed.result === null ? undefined : JSON.stringify(claimed.result),
        );
      }
      if (claimed?.drain && d.key !== null) this.#drainInBackground(d.key, obs.parent);
      if (claimed?.decision === 'pending' && this.#workers) {
        // After the commit: the event is now visible to the worker this wakes. (A duplicate of
        // a pending event counts again, erring towards shedding until the next refresh.)
        this.#workers.notePending();
        this.#workers.wake(d.key);
      }
      return outcome;
    } catch (err) {
      if (err instanceof HandlerError) return this.#failed(database, d, claimed, err);
      return this.#infrastructureFailure(err);
    }
  }

  /** One Redis SET after a commit as processed; the response does not wait (`idle()` does). */
  #rememberInRedis(
    id: string,
    hash: string,
    key: string | null,
    seq: number | null,
    resultJson: string | undefined,
  ): void {
    if (this.#redis) this.#track(this.#redis.remember(id, { hash, key, seq }, resultJson));
  }

  /** Runs the handler in `tx` and stores what it returns. Any throw becomes a HandlerError. */
  async #runHandler(
    tx: Kysely<any>,
    event: InboxEvent,
    parent: Context | undefined,
  ): Promise<{ result: unknown; json: string | undefined }> {
    let result: unknown;
    let json: string | undefined;
    const started = performance.now();
    try {
      // runHandler gives the handler its context (signal, idempotencyKey) and enforces
      // handlerTimeoutMs; it throws HandlerError.
      result = await inSpan(this.#tracer, 'webhook-inbox.handler', parent, async () =>
        runHandler(this.options.handle, event, tx as any, this.options.handlerTimeoutMs),
      );
      json = result === undefined ? undefined : JSON.stringify(result);
    } catch (err) {
      this.#metrics.handler((performance.now() - started) / 1000, 'failed');
      throw err instanceof HandlerError ? err : new HandlerError(err);
    }
    this.#metrics.handler((performance.now() - started) / 1000, 'processed');
    if (json !== undefined) await this.#statements!.storeResult(tx, this.options.source, event.id, json);
    return { result, json };
  }

  #decided(d: ParsedDelivery, c: ClaimRow): Outcome {
    switch (c.decision) {
      case 'duplicate':
        return duplicate(d.id, c.result);
      case 'held':
        return ok(OutcomeKind.held, 202, {
          status: 'held',
          id: d.id,
          key: d.key,
          seq: d.seq,
          expected: c.expected,
        });
      case 'pending':
        return ok(OutcomeKind.pending, 202, { status: 'pending', id: d.id });
      case 'dead':
        return ok(OutcomeKind.deadLettered, 200, { status: 'dead-lettered', id: d.id, reason: c.reason });
      case 'mismatch': {
        if (c.reason === 'seq-taken') {
          const h = this.options.headers;
          return problem(
            OutcomeKind.mismatch,
            422,
            `${h.seq} ${d.seq} of this ${h.key} is already held for another ${h.id}`,
            { field: h.seq },
          );
        }
        const field =
          c.reason === 'key'
            ? this.options.headers.key
            : c.reason === 'seq'
              ? this.options.headers.seq
              : 'body';
        return problem(
          OutcomeKind.mismatch,
          422,
          `${this.options.headers.id} ${JSON.stringify(d.id)} was first used with a different ${c.reason === 'body' ? 'body' : field}`,
          { field },
        );
      }
      case 'buffer-full':
        return problem(
          OutcomeKind.bufferFull,
          429,
          c.reason === 'seq-ahead'
            ? `${this.options.headers.seq} ${d.seq} is more than ${this.options.maxSeqAhead} past the next expected seq ${c.expected}`
            : `key already holds ${this.options.maxHeldPerKey} events waiting for seq ${c.expected}`,
          {
            field: c.reason === 'seq-ahead' ? this.options.headers.seq : this.options.headers.key,
            expected: c.expected,
            retryAfterSeconds: Math.max(1, Math.ceil(this.options.gapTimeoutMs / 1000)),
          },
        );
      default:
        throw new Error(`webhook-inbox: unexpected claim decision ${c.decision}`);
    }
  }

  #unverified(err: unknown): Outcome {
    if (err instanceof UnauthorizedDeliveryError) {
      this.options.logger.info(
        { field: err.field, reason: err.message },
        'webhook-inbox: unverified delivery',
      );
      return problem(OutcomeKind.unauthorized, 401, err.message, { field: err.field });
    }
    // The verifier itself failed (a custom hook fetching keys, say): not the sender's fault,
    // so ask for a retry instead of a 401 that could get the endpoint disabled.
    this.options.logger.error({ err }, 'webhook-inbox: signature verification failed to run');
    return problem(
      OutcomeKind.unavailable,
      503,
      'The delivery could not be verified; deliver it again later',
      {
        retryAfterSeconds: 1,
      },
    );
  }

  /** The handler threw: its transaction rolled back; count the attempt apart (one round trip). */
  async #failed(
    database: Database,
    d: ParsedDelivery,
    c: ClaimRow | undefined,
    err: HandlerError,
  ): Promise<Outcome> {
    const o = this.options;
    o.logger.warn(
      { err: err.cause, id: d.id, key: d.key, seq: d.seq, source: o.source },
      'webhook-inbox: handler failed',
    );
    try {
      const row = await this.#statements!.fail(database.kysely, {
        source: o.source,
        id: d.id,
        key: d.key,
        seq: d.seq,
        hash: d.hash,
        payload: d.rawBody,
        headers: storableHeaders(d.headers),
        error: errorMessage(err.cause),
        maxAttempts: o.maxAttempts,
        onPoison: o.onPoison,
        retryInMs: backoffMs(c?.attempts ?? 0, o.retryBaseMs, o.retryCapMs),
        receivedAt: c?.receivedAt ?? null,
      });
      if (row.decision === 'dead') {
        this.#deadLettered(d.id, d.key, d.seq, row.attempts);
        if (row.drain && d.key !== null) this.#drainInBackground(d.key);
        return ok(OutcomeKind.deadLettered, 200, { status: 'dead-lettered', id: d.id, reason: 'poison' });
      }
    } catch (failErr) {
      o.logger.error({ err: failErr, id: d.id }, 'webhook-inbox: could not record the failed attempt');
    }
    return problem(
      OutcomeKind.failed,
      500,
      'The handler failed; nothing was applied. Deliver the event again.',
      {
        id: d.id,
      },
    );
  }

  #infrastructureFailure(err: unknown): Outcome {
    if (err instanceof PoolWaitTimeoutError) return shed('pool');
    if (CONTENDED.has(sqlState(err) ?? '')) {
      return problem(
        OutcomeKind.inFlight,
        409,
        'Another delivery of this event (or of its key) is being processed',
        {
          retryAfterSeconds: 1,
        },
      );
    }
    this.options.logger.error({ err }, 'webhook-inbox: delivery failed in the inbox');
    return unavailable();
  }

  /**
   * The outcome for an error an adapter caught (a misconfigured body parser, a bug): 500
   * problem+json with nothing internal in it. The error itself goes to the logger, and a
   * misconfiguration also to a process warning, once, so it is seen without a logger.
   */
  outcomeForError(err: unknown): Outcome {
    if (err instanceof RawBodyUnavailableError) {
      if (!this.#warnedRawBody) {
        this.#warnedRawBody = true;
        process.emitWarning(err.message, 'WebhookInboxWarning');
      }
      this.options.logger.error({ err }, err.message);
      return problem(
        OutcomeKind.unavailable,
        500,
        'The inbox is misconfigured: the request body was consumed before it',
        {},
      );
    }
    this.options.logger.error({ err }, 'webhook-inbox: unexpected error');
    return problem(
      OutcomeKind.failed,
      500,
      'The delivery could not be processed; deliver it again later',
      {},
    );
  }

  // ---- drains and the sweeper ---------------------------------------------------------

  #track<T>(promise: Promise<T>): Promise<T> {
    this.#background.add(promise);
    promise.finally(() => this.#background.delete(promise)).catch(() => {});
    return promise;
  }

  /** A poison event was just dead-lettered: count it, say it, and say when it blocks its key. */
  #deadLettered(id: string, key: string | null, seq: number | null, attempts: number): void {
    const o = this.options;
    this.#metrics.deadLetter('poison');
    o.logger.info({ id, key, seq, source: o.source, attempts }, 'webhook-inbox: dead-lettered (poison)');
    if (key !== null && o.onPoison === 'block') {
      o.logger.info({ key, blockedSeq: seq, source: o.source }, 'webhook-inbox: key blocked (poison)');
    }
  }

  #drainInBackground(key: string, parent?: Context): void {
    // Right after the response: the delivery's commit is what made the held events runnable.
    this.#track(
      new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.#drain(key, true, parent)),
    );
  }

  /**
   * Applies the key's waiting events in seq order, each in its own transaction, until the
   * next one is missing (or the key is blocked, or someone else holds it). Returns how many
   * it applied.
   */
  drain(key: string, wait = false): Promise<number> {
    return this.#drain(key, wait, undefined);
  }

  /** A drain is a span of its own: a child of the delivery that unblocked it, or a root for the sweeper. */
  async #drain(key: string, wait: boolean, parent: Context | undefined): Promise<number> {
    const database = await this.ready();
    // Deferred mode: the workers' way (take_turn), which leaves the key unlocked during the handler.
    if (this.#workers && this.options.mode === 'deferred') return this.#workers.drainKey(key);
    const span = this.#tracer.startSpan('webhook-inbox.drain', undefined, parent);
    const spanParent = parentOf(span);
    const started = performance.now();
    let applied = 0;
    try {
      for (;;) {
        const step = await this.#applyNext(database, key, wait, spanParent);
        if (step.applied) applied++;
        if (!step.more || this.#closing) return applied;
      }
    } finally {
      if (applied > 0) this.#metrics.drain((performance.now() - started) / 1000);
      if (spanParent) {
        span.setAttributes({
          [SpanAttributes.source]: this.options.source,
          [SpanAttributes.applied]: applied,
        });
      }
      span.end();
    }
  }

  async #applyNext(
    database: Database,
    key: string,
    wait: boolean,
    parent: Context | undefined,
  ): Promise<{ applied: boolean; more: boolean }> {
    const o = this.options;
    const s = this.#statements!;
    let taken: TakenEvent | undefined;
    let resultJson: string | undefined;
    try {
      await database.kysely.transaction().execute(async (tx) => {
        taken = await s.takeNext(tx, o.source, key, wait, o.keepPayload, this.#lockTimeout);
        if (!taken) return;
        const headers = taken.headers;
        const ran = await this.#runHandler(
          tx,
          {
            id: taken.id,
            source: o.source,
            key,
            seq: taken.seq,
            body: parseBody(taken.payload, headers['content-type'], o.parse),
            rawBody: taken.payload,
            headers,
            attempt: taken.attempts + 1,
            receivedAt: taken.receivedAt,
          },
          parent,
        );
        resultJson = ran.json;
      });
      if (taken) this.#rememberInRedis(taken.id, taken.hash, key, taken.seq, resultJson);
      return { applied: !!taken, more: !!taken?.more };
    } catch (err) {
      if (!(err instanceof HandlerError) || !taken) {
        if (!CONTENDED.has(sqlState(err) ?? '')) o.logger.error({ err, key }, 'webhook-inbox: drain failed');
        return { applied: false, more: false };
      }
      o.logger.warn(
        { err: err.cause, id: taken.id, key, seq: taken.seq },
        'webhook-inbox: handler failed during drain',
      );
      const row = await this.#recordFailure(database, taken, key, taken.seq, err.cause);
      if (row?.decision === 'dead') this.#deadLettered(taken.id, key, taken.seq, row.attempts);
      return { applied: false, more: row?.drain === true };
    }
  }

  /**
   * Counts a failed run of an event a drain, the sweeper or a worker took (its transaction
   * rolled back): one round trip. Undefined when even that failed (logged).
   */
  #recordFailure(
    database: Database,
    taken: {
      id: string;
      hash: string;
      payload: Buffer;
      headers: Record<string, string>;
      attempts: number;
      receivedAt: Date;
    },
    key: string | null,
    seq: number | null,
    cause: unknown,
  ) {
    const o = this.options;
    return this.#statements!.fail(database.kysely, {
      source: o.source,
      id: taken.id,
      key,
      seq,
      hash: taken.hash,
      payload: taken.payload,
      headers: taken.headers,
      error: errorMessage(cause),
      maxAttempts: o.maxAttempts,
      onPoison: o.onPoison,
      retryInMs: backoffMs(taken.attempts, o.retryBaseMs, o.retryCapMs),
      receivedAt: taken.receivedAt,
    }).catch((failErr) => {
      o.logger.error({ err: failErr, id: taken.id }, 'webhook-inbox: could not record the failed attempt');
      return undefined;
    });
  }

  #scheduleSweep(): void {
    this.#sweepTimer = setTimeout(() => {
      this.#sweeping = this.sweep()
        .catch((err) => this.options.logger.error({ err }, 'webhook-inbox: sweeper pass failed'))
        .finally(() => {
          this.#sweeping = undefined;
          if (!this.#closing) this.#scheduleSweep();
        });
    }, this.options.sweepIntervalMs);
    this.#sweepTimer.unref();
  }

  /**
   * One sweeper pass, now: finishes drains a crash interrupted and applies gap timeouts.
   * Runs every `sweepIntervalMs` on its own; call it directly in tests and scripts.
   */
  async sweep(): Promise<SweepReport> {
    const database = await this.ready();
    const o = this.options;
    this.#metrics.sweeperRun();
    let rows: SweepRow[];
    try {
      rows = await this.#statements!.sweep(database.kysely, o.source, o.gapTimeoutMs, o.onGapTimeout, 500);
    } catch (err) {
      this.#metrics.sweeperError();
      throw err;
    }
    const report: SweepReport = { drained: 0, gapsSkipped: 0, keysBlocked: 0, applied: 0, pruned: 0 };
    const toDrain: string[] = [];
    for (const row of rows) {
      if (row.action === 'blocked') {
        report.keysBlocked++;
        this.#metrics.gapTimeout('blocked');
        o.logger.info(
          { key: row.key, fromSeq: row.fromSeq, source: o.source },
          'webhook-inbox: gap timeout, key blocked',
        );
        continue;
      }
      if (row.action === 'skipped') {
        report.gapsSkipped++;
        this.#metrics.gapTimeout('skipped');
        o.logger.info(
          { key: row.key, fromSeq: row.fromSeq, toSeq: row.toSeq, source: o.source },
          'webhook-inbox: gap timeout, seqs skipped',
        );
      }
      toDrain.push(row.key);
    }
    // A few keys at a time: each drain holds a connection while its handler runs.
    const lanes = Math.max(1, Math.min(4, Math.floor(o.poolSize / 2)));
    let next = 0;
    await Promise.all(
      Array.from({ length: Math.min(lanes, toDrain.length) }, async () => {
        while (next < toDrain.length && !this.#closing) {
          report.drained += await this.#track(this.#drain(toDrain[next++], false, undefined));
        }
      }),
    );
    // Unordered pending events (a replayed dead letter, an inline run that failed): one
    // take_pending round trip per pass when there are none. The deferred-mode workers (#8)
    // apply pending events on the same function.
    while (report.applied < PENDING_PER_SWEEP && !this.#closing) {
      const step = await this.#track(this.#applyPending(database));
      if (!step.taken) break;
      if (step.applied) report.applied++;
    }
    // Retention: one small batch, at most once a minute while caught up, every pass while behind.
    if (o.retention !== false && Date.now() >= this.#nextPruneAt && !this.#closing) {
      const { pruned } = await this.#operations!.prune({
        olderThan: o.retention,
        batchSize: PRUNE_BATCH,
        maxBatches: 1,
      });
      report.pruned = pruned;
      this.#nextPruneAt = pruned === PRUNE_BATCH ? 0 : Date.now() + PRUNE_EVERY_MS;
      if (pruned > 0) o.logger.debug({ pruned, source: o.source }, 'webhook-inbox: pruned processed events');
    }
    return report;
  }

  /**
   * Applies one due unordered pending event (take_pending of migration 0003, SKIP LOCKED) in
   * its own transaction, counting a handler failure apart like every other path.
   */
  async #applyPending(database: Database): Promise<{ taken: boolean; applied: boolean }> {
    const o = this.options;
    const s = this.#statements!;
    let taken: PendingEvent | undefined;
    let resultJson: string | undefined;
    try {
      await database.kysely.transaction().execute(async (tx) => {
        taken = await s.takePending(tx, o.source, o.keepPayload);
        if (!taken) return;
        const ran = await this.#runHandler(
          tx,
          {
            id: taken.id,
            source: o.source,
            key: null,
            seq: null,
            body: parseBody(taken.payload, taken.headers['content-type'], o.parse),
            rawBody: taken.payload,
            headers: taken.headers,
            attempt: taken.attempts + 1,
            receivedAt: taken.receivedAt,
          },
          undefined,
        );
        resultJson = ran.json;
      });
      if (taken) this.#rememberInRedis(taken.id, taken.hash, null, null, resultJson);
      return { taken: !!taken, applied: !!taken };
    } catch (err) {
      if (!(err instanceof HandlerError) || !taken) {
        o.logger.error({ err }, 'webhook-inbox: applying a pending event failed');
        return { taken: false, applied: false };
      }
      o.logger.warn({ err: err.cause, id: taken.id }, 'webhook-inbox: handler failed on a pending event');
      const row = await this.#recordFailure(database, taken, null, null, err.cause);
      if (row?.decision === 'dead') o.logger.info({ id: taken.id }, 'webhook-inbox: dead-lettered (poison)');
      return { taken: true, applied: false };
    }
  }

  /** Resolves when no drain started by this instance is running. */
  async idle(): Promise<void> {
    for (;;) {
      while (this.#background.size > 0) await Promise.allSettled([...this.#background]);
      await this.#workers?.idle();
      if (this.#background.size === 0) return;
    }
  }

  /** Stops the sweeper, waits for drains in flight, and closes the database if the inbox opened it. */
  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    clearTimeout(this.#sweepTimer);
    // Workers stop taking work and finish the handlers they are running.
    await this.#workers?.close();
    await this.#sweeping;
    await this.idle();
    if (this.#database) {
      const database = await this.#database.catch(() => undefined);
      await database?.destroy();
    }
    await this.#telemetry?.catch(() => {});
    this.#detachMetrics?.();
    await this.#redis?.close();
  }

  // ---- health ---------------------------------------------------------------------------

  async #stats(): Promise<InboxStats> {
    const database = await this.ready();
    return this.#statements!.stats(database.kysely, this.options.source);
  }

  /**
   * Can this instance take deliveries? One cheap query and one Redis PING, each bounded by a
   * short timeout. `ok` is false only when Postgres does not answer: without Redis, the
   * inbox is slower on duplicates but as correct (`redis: 'down'` means degraded).
   *
   * ```ts
   * const { ok, redis, held, deadLetters } = await inbox.health();
   * ```
   */
  async health(): Promise<InboxHealth> {
    const [stats, redis] = await Promise.all([
      withTimeout(this.#stats(), HEALTH_TIMEOUT_MS).catch((err) => {
        this.options.logger.warn({ err }, 'webhook-inbox: health check: Postgres does not answer');
        return undefined;
      }),
      this.options.redis === undefined
        ? ('disabled' as const)
        : this.#setUpTelemetry()
            .then(() => this.#redis?.ping(HEALTH_TIMEOUT_MS) ?? ('down' as const))
            .catch(() => 'down' as const),
    ]);
    return {
      ok: stats !== undefined,
      postgres: stats ? 'up' : 'down',
      redis,
      held: stats?.held ?? null,
      oldestHeldAgeMs: stats ? stats.oldestHeldAgeMs : null,
      blockedKeys: stats?.blockedKeys ?? null,
      deadLetters: stats?.deadLetters ?? null,
    };
  }

  /** `health()` as an outcome for adapters to write: 200 when ok (even degraded), else 503. */
  async healthOutcome(): Promise<Outcome> {
    const health = await this.health();
    return {
      kind: OutcomeKind.health,
      status: health.ok ? 200 : 503,
      headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' },
      body: health as unknown as Record<string, unknown>,
    };
  }

  // ---- inspection -----------------------------------------------------------------------

  /** The key's cursor, state and buffered events. */
  async keyState(key: string): Promise<KeyState | undefined> {
    return keyState((await this.ready()).kysely, this.tables, this.options.source, key);
  }

  /** Events held for `key` (or every key), in seq order. */
  async held(key?: string): Promise<StoredEvent[]> {
    return listEvents((await this.ready()).kysely, this.tables, this.options.source, { key, status: 'held' });
  }

  // ---- operator actions (src/operations/; the CLI runs the same ones) --------------------

  /** The operator actions, on this inbox's source: what the CLI runs, without draining. */
  async operations(): Promise<Operations> {
    await this.ready();
    return this.#operations!;
  }

  /**
   * Dead-lettered events (poison, late), oldest first, with their payloads and whether each
   * blocks its key.
   *
   * ```ts
   * const poison = await inbox.deadLetters({ reason: 'poison', olderThan: '1h' });
   * ```
   */
  async deadLetters(filter: Omit<DeadLetterFilter, 'source'> = {}): Promise<DeadLetter[]> {
    return (await this.operations()).deadLetters(filter);
  }

  /** One stored event by id, as a dead letter is shown (throws OperationError `not-found`). */
  async deadLetter(id: string): Promise<DeadLetter> {
    return (await this.operations()).deadLetter(id);
  }

  /**
   * Replays dead letters through the inbox: each is re-queued (attempts reset, its key
   * unblocked when it was blocked at its seq) and applied now by the normal drain path, in
   * seq order, in the handler's transaction. Fix the handler first: a replay that fails again
   * counts attempts and is dead-lettered again after `maxAttempts`.
   *
   * ```ts
   * const [r] = await inbox.replay('evt_123');   // r.status === 'processed'
   * await inbox.replay({ all: true, reason: 'poison', key: 'acct-7' });
   * ```
   */
  async replay(selection: ReplaySelection): Promise<ReplayResult[]> {
    const database = await this.ready();
    const ops = this.#operations!;
    const results = await ops.replay(selection);
    const keys = new Set<string>();
    let unordered = 0;
    for (const r of results) {
      if (r.outcome !== 'requeued') continue;
      if (r.key === null) unordered++;
      else keys.add(r.key);
    }
    for (const key of keys) await this.drain(key, true);
    // take_pending takes the due pending events in due order: the re-queued ones, after any
    // that were already due (those are applied too, as the sweeper would).
    for (let budget = unordered + PENDING_PER_SWEEP; unordered > 0 && budget > 0; budget--) {
      if (!(await this.#applyPending(database)).taken) break;
    }
    const now = await ops.statuses(
      this.options.source,
      results.filter((r) => r.outcome === 'requeued').map((r) => r.id),
    );
    for (const r of results) if (now.has(r.id)) r.status = now.get(r.id)!;
    return results;
  }

  /**
   * Moves a blocked key past its blocked seq (a dead letter's, by `id`; or what blocks `key`),
   * records the skipped seqs as a gap, and drains what follows.
   */
  async skip(target: { id: string } | { key: string }): Promise<SkipResult & { drained: number }> {
    const result = await (await this.operations()).skip(target);
    return { ...result, drained: await this.drain(result.key, true) };
  }

  /** Opens a blocked key without moving its cursor, and drains what waits at it. */
  async unblock(key: string): Promise<KeySummary & { drained: number }> {
    const summary = await (await this.operations()).unblock(key);
    return { ...summary, drained: await this.drain(key, true) };
  }

  /** Keys that are blocked or hold events, longest waiting first. */
  async keys(filter: { blocked?: boolean; limit?: number } = {}): Promise<KeySummary[]> {
    return (await this.operations()).keys(filter);
  }

  /**
   * Deletes processed rows older than `olderThan` now (the sweeper does it by `retention`).
   *
   * ```ts
   * const { pruned } = await inbox.prune({ olderThan: '30d', dryRun: true });
   * ```
   */
  async prune(options: Omit<PruneOptions, 'source'>): Promise<PruneResult> {
    return (await this.operations()).prune(options);
  }

  /** Counts by status, blocked keys, oldest waiting ages, dead letters by reason. */
  async status(): Promise<InboxStatus> {
    return (await this.operations()).status();
  }

  /** One stored event by id. */
  async event(id: string): Promise<StoredEvent | undefined> {
    const [row] = await listEvents((await this.ready()).kysely, this.tables, this.options.source, {
      id,
      limit: 1,
    });
    return row;
  }
}

function duplicate(id: string, result: unknown): Outcome {
  return ok(OutcomeKind.duplicate, 200, { status: 'duplicate', id, result }, true);
}

function invalid(err: InvalidDeliveryError): Outcome {
  return problem(OutcomeKind.invalid, err.status, err.message, { field: err.field });
}

/** 503 with Retry-After, nothing stored: the sender keeps the event and delivers it again later. */
function shed(reason: 'in-flight' | 'pool' | 'pending'): Outcome {
  const detail =
    reason === 'pending'
      ? 'Too many events are waiting to be applied; deliver the event again later'
      : 'Too many deliveries are in flight; deliver the event again later';
  return problem(OutcomeKind.shed, 503, detail, { reason, retryAfterSeconds: reason === 'pending' ? 5 : 1 });
}

function unavailable(): Outcome {
  return problem(
    OutcomeKind.unavailable,
    503,
    'The inbox cannot reach its database; deliver the event again later',
    {
      retryAfterSeconds: 1,
    },
  );
}

/**
 * Creates an inbox.
 *
 * ```ts
 * const inbox = createInbox({
 *   db: process.env.DATABASE_URL,
 *   async handle(event, { tx }) {
 *     await tx.insertInto('orders').values({ id: event.body.orderId }).execute();
 *     return { ok: true };
 *   },
 * });
 * const outcome = await inbox.receive({ headers, rawBody });
 * ```
 */
export function createInbox<TBody = any>(options: InboxOptions<TBody>): Inbox {
  return new Inbox(options as InboxOptions);
}
