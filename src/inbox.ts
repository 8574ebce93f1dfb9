/**
 * The inbox: one framework-free state machine, `receive(delivery) → outcome`.
 *
 * Round trips to Postgres per delivery (the hot path; a change that adds one says why):
 * - unique event, applied now (unordered, or ordered and its turn):
 *   BEGIN, claim, <the handler's own statements>, [store result], COMMIT
 *   = the handler's + 3, and + 1 only when the handler returns a result to replay.
 * - duplicate this instance saw processed (bounded LRU, `duplicateCacheSize`): 0.
 * - other duplicate, held, late, mismatch, buffer-full: BEGIN, claim, COMMIT = 3.
 * - handler throws: BEGIN, claim, <handler>, ROLLBACK, then `fail` (autocommit) = + 1.
 * - each held event drained after the response: BEGIN, take_next, <handler>, [result], COMMIT.
 * The claim decides everything in one statement (a PL/pgSQL function shipped by the
 * migrations) because the whole transaction rolls back if the handler throws: the event row
 * is inserted already as processed and the cursor already advanced.
 */
import type { Kysely } from 'kysely';
import { type Database, openDatabase } from './database.js';
import { type Delivery, type ParsedDelivery, parseBody, parseDelivery, storableHeaders } from './delivery.js';
import { HandlerError, InvalidDeliveryError, RawBodyUnavailableError } from './errors.js';
import type { InboxEvent } from './event.js';
import { ProcessedCache } from './local-cache.js';
import { migrateToLatest } from './migrations.js';
import { type InboxOptions, type ResolvedOptions, resolveOptions } from './options.js';
import { type Outcome, OutcomeKind, ok, problem } from './outcome.js';
import { type BodyStream, readRawBody } from './raw-body.js';
import { type ClaimRow, createClaim } from './sql/claim.js';
import { createTakeNext, type TakenEvent } from './sql/drain.js';
import { createFail } from './sql/fail.js';
import { createStoreResult } from './sql/finalize.js';
import { type KeyState, keyState, listEvents, type StoredEvent } from './sql/inspect.js';
import { createSweep, type SweepRow } from './sql/sweep.js';
import { createTables, type Tables } from './sql/tables.js';

/** SQLSTATEs that mean "someone else holds this id or key right now": answer 409, retry later. */
const CONTENDED = new Set(['55P03', '40P01', '40001']);

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
  sweep: ReturnType<typeof createSweep>;
}

/** What one sweeper pass did. */
export interface SweepReport {
  drained: number;
  gapsSkipped: number;
  keysBlocked: number;
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
  readonly #processed: ProcessedCache;

  constructor(options: InboxOptions) {
    this.options = resolveOptions(options);
    this.tables = createTables(this.options.schema, this.options.tablePrefix);
    this.#lockTimeout = `${this.options.lockTimeoutMs}ms`;
    this.#processed = new ProcessedCache(this.options.duplicateCacheSize);
  }

  /** Opens the database, runs migrations (unless `migrate: false`) and starts the sweeper. Idempotent. */
  ready(): Promise<Database> {
    this.#database ??= this.#open();
    return this.#database;
  }

  async #open(): Promise<Database> {
    const database = await openDatabase(this.options.db, {
      dataDir: this.options.dataDir,
      poolSize: this.options.poolSize,
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
      sweep: createSweep(names, this.tables),
    };
    if (this.options.sweepIntervalMs > 0 && !this.#closing) this.#scheduleSweep();
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
    let rawBody: Buffer;
    try {
      const length = headers['content-length'];
      rawBody = await readRawBody(
        stream,
        this.options.maxBodyBytes,
        typeof length === 'string' ? length : undefined,
      );
    } catch (err) {
      if (err instanceof InvalidDeliveryError) return invalid(err);
      throw err;
    }
    return this.receive({ headers, rawBody });
  }

  /** Turns one delivery into its outcome (DESIGN.md §1). Never throws for a bad delivery. */
  async receive(delivery: Delivery): Promise<Outcome> {
    let parsed: ParsedDelivery;
    try {
      parsed = parseDelivery(delivery, this.options);
    } catch (err) {
      if (err instanceof InvalidDeliveryError) return invalid(err);
      throw err;
    }
    const cached = this.#processed.duplicateOf(parsed.id, parsed.hash, parsed.key, parsed.seq);
    if (cached) return duplicate(parsed.id, cached.result); // zero round trips: see local-cache.ts
    let database: Database;
    try {
      database = await this.ready();
    } catch (err) {
      this.options.logger.error({ err }, 'webhook-inbox: database unavailable');
      return unavailable();
    }
    return this.#apply(database, parsed);
  }

  async #apply(database: Database, d: ParsedDelivery): Promise<Outcome> {
    const o = this.options;
    const s = this.#statements!;
    const ordered = d.key !== null;
    let claimed: ClaimRow | undefined;
    let resultJson: string | undefined;
    try {
      const outcome = await database.kysely.transaction().execute(async (tx) => {
        claimed = await s.claim(tx, {
          source: o.source,
          id: d.id,
          key: d.key,
          seq: d.seq,
          hash: d.hash,
          // Only an ordered event can be held (and so need its payload later) in this claim.
          payload: ordered || o.keepPayload ? d.rawBody : null,
          headers: ordered || o.keepPayload ? storableHeaders(d.headers) : null,
          apply: true,
          keepPayload: o.keepPayload,
          firstSeen: o.firstSeq === 'first-seen',
          maxHeld: o.maxHeldPerKey,
          maxAhead: o.maxSeqAhead,
          lockTimeout: this.#lockTimeout,
        });
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
        const { result, json } = await this.#runHandler(tx, event);
        resultJson = json;
        return ok(OutcomeKind.processed, 200, { status: 'processed', id: d.id, result: result ?? null });
      });
      // Committed. Only now may the event be remembered as processed.
      if (outcome.kind === OutcomeKind.processed)
        this.#processed.remember(d.id, d.hash, d.key, d.seq, resultJson);
      else if (outcome.kind === OutcomeKind.duplicate && claimed) {
        this.#processed.remember(
          d.id,
          d.hash,
          d.key,
          d.seq,
          claimed.result === null ? undefined : JSON.stringify(claimed.result),
        );
      }
      if (claimed?.drain && d.key !== null) this.#drainInBackground(d.key);
      return outcome;
    } catch (err) {
      if (err instanceof HandlerError) return this.#failed(database, d, claimed, err);
      return this.#infrastructureFailure(err);
    }
  }

  /** Runs the handler in `tx` and stores what it returns. Any throw becomes a HandlerError. */
  async #runHandler(
    tx: Kysely<any>,
    event: InboxEvent,
  ): Promise<{ result: unknown; json: string | undefined }> {
    let result: unknown;
    let json: string | undefined;
    try {
      result = await this.options.handle(event, { tx: tx as any });
      json = result === undefined ? undefined : JSON.stringify(result);
    } catch (err) {
      throw new HandlerError(err);
    }
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
        o.logger.info(
          { id: d.id, key: d.key, seq: d.seq, source: o.source, attempts: row.attempts },
          'webhook-inbox: dead-lettered (poison)',
        );
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

  #drainInBackground(key: string): void {
    // Right after the response: the delivery's commit is what made the held events runnable.
    this.#track(new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.drain(key, true)));
  }

  /**
   * Applies the key's waiting events in seq order, each in its own transaction, until the
   * next one is missing (or the key is blocked, or someone else holds it). Returns how many
   * it applied.
   */
  async drain(key: string, wait = false): Promise<number> {
    const database = await this.ready();
    let applied = 0;
    for (;;) {
      const step = await this.#applyNext(database, key, wait);
      if (step.applied) applied++;
      if (!step.more || this.#closing) return applied;
    }
  }

  async #applyNext(
    database: Database,
    key: string,
    wait: boolean,
  ): Promise<{ applied: boolean; more: boolean }> {
    const o = this.options;
    const s = this.#statements!;
    let taken: TakenEvent | undefined;
    try {
      await database.kysely.transaction().execute(async (tx) => {
        taken = await s.takeNext(tx, o.source, key, wait, o.keepPayload, this.#lockTimeout);
        if (!taken) return;
        const headers = taken.headers;
        await this.#runHandler(tx, {
          id: taken.id,
          source: o.source,
          key,
          seq: taken.seq,
          body: parseBody(taken.payload, headers['content-type'], o.parse),
          rawBody: taken.payload,
          headers,
          attempt: taken.attempts + 1,
          receivedAt: taken.receivedAt,
        });
      });
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
      const row = await s
        .fail(database.kysely, {
          source: o.source,
          id: taken.id,
          key,
          seq: taken.seq,
          hash: taken.hash,
          payload: taken.payload,
          headers: taken.headers,
          error: errorMessage(err.cause),
          maxAttempts: o.maxAttempts,
          onPoison: o.onPoison,
          retryInMs: backoffMs(taken.attempts, o.retryBaseMs, o.retryCapMs),
          receivedAt: taken.receivedAt,
        })
        .catch((failErr) => {
          o.logger.error(
            { err: failErr, id: taken!.id },
            'webhook-inbox: could not record the failed attempt',
          );
          return undefined;
        });
      if (row?.decision === 'dead')
        o.logger.info({ id: taken.id, key, seq: taken.seq }, 'webhook-inbox: dead-lettered (poison)');
      return { applied: false, more: row?.drain === true };
    }
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
    const rows: SweepRow[] = await this.#statements!.sweep(
      database.kysely,
      o.source,
      o.gapTimeoutMs,
      o.onGapTimeout,
      500,
    );
    const report: SweepReport = { drained: 0, gapsSkipped: 0, keysBlocked: 0 };
    const toDrain: string[] = [];
    for (const row of rows) {
      if (row.action === 'blocked') {
        report.keysBlocked++;
        o.logger.info(
          { key: row.key, fromSeq: row.fromSeq, source: o.source },
          'webhook-inbox: gap timeout, key blocked',
        );
        continue;
      }
      if (row.action === 'skipped') {
        report.gapsSkipped++;
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
          report.drained += await this.#track(this.drain(toDrain[next++], false));
        }
      }),
    );
    return report;
  }

  /** Resolves when no drain started by this instance is running. */
  async idle(): Promise<void> {
    while (this.#background.size > 0) await Promise.allSettled([...this.#background]);
  }

  /** Stops the sweeper, waits for drains in flight, and closes the database if the inbox opened it. */
  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    clearTimeout(this.#sweepTimer);
    await this.#sweeping;
    await this.idle();
    if (this.#database) {
      const database = await this.#database.catch(() => undefined);
      await database?.destroy();
    }
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

  /** Dead-lettered events (poison, late), with their payloads. */
  async deadLetters(filter: { key?: string; limit?: number } = {}): Promise<StoredEvent[]> {
    return listEvents((await this.ready()).kysely, this.tables, this.options.source, {
      ...filter,
      status: 'dead',
    });
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
