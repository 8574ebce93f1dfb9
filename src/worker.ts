/**
 * Workers: apply runnable events in the background, in every instance (deferred mode, and
 * inline mode when `workers` is set). There is no second queue: the events table is the queue.
 * - an ordered key's next event (held or pending) is taken at the key's cursor by `take_turn`,
 *   and the cursor moved by `advance` after the handler: `take_next`'s rule without holding the
 *   key's lock during the handler (see migration 0003); the sweeper's drains go the same way;
 * - an unordered pending event is taken by `take_pending` (FOR UPDATE SKIP LOCKED).
 * Each runs in its own transaction with the handler, so it is applied exactly once; SKIP
 * LOCKED lets every instance's workers share the work without waiting on each other.
 *
 * Wake-ups, so that pickup takes milliseconds rather than a poll interval:
 * - in this process, a delivery stored as pending wakes a lane right after its commit;
 * - across instances, the claim's INSERT fires a NOTIFY (trigger of migration 0003, sent at
 *   COMMIT, no extra round trip), and a dedicated connection LISTENs for it (pg only);
 * - a poll every `pollIntervalMs` catches the rest: retries whose backoff ended, notifications
 *   missed while the listener reconnected, and other instances on PGlite (no LISTEN there).
 * Ordered keys are also swept by the sweeper every `sweepIntervalMs` (it finishes interrupted
 * drains and takes due retries).
 */
import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import { parseBody } from './delivery.js';
import { HandlerError } from './errors.js';
import type { InboxEvent } from './event.js';
import type { ResolvedOptions } from './options.js';
import type {
  createAdvance,
  createCountPending,
  createTakePending,
  createTakeTurn,
  PendingEvent,
  TurnEvent,
} from './sql/deferred.js';
import { notifyChannel } from './sql/deferred-migration.js';
import type { createFail } from './sql/fail.js';
import type { Tables } from './sql/tables.js';

/** What the workers need from the inbox (kept narrow: the inbox stays the only state machine). */
export interface WorkerHost {
  readonly options: ResolvedOptions;
  readonly tables: Tables;
  readonly database: Database;
  readonly takePending: ReturnType<typeof createTakePending>;
  readonly countPending: ReturnType<typeof createCountPending>;
  readonly takeTurn: ReturnType<typeof createTakeTurn>;
  readonly advance: ReturnType<typeof createAdvance>;
  readonly fail: ReturnType<typeof createFail>;
  /** Runs the handler in `tx` and stores its result; a throw becomes a HandlerError. */
  runHandler(tx: Kysely<any>, event: InboxEvent): Promise<unknown>;
  /** Backoff before the next attempt, after `attempts` failed ones. */
  retryInMs(attempts: number): number;
  errorMessage(err: unknown): string;
}

/** Keys remembered for a wake-up; past it, hints are dropped and the sweeper finds the keys. */
const MAX_KEY_HINTS = 10_000;
/** How often the pending count behind `maxPending` is read again. */
const PENDING_REFRESH_MS = 500;
const LISTEN_RETRY_MS = 1000;

/** The subset of `pg.Client` the listener needs. */
interface ListenerClient {
  query(config: { text: string }): Promise<unknown>;
  release(err?: Error | boolean): void;
  on(event: 'notification', listener: (msg: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error' | 'end', listener: (err?: Error) => void): unknown;
  connect?(): Promise<unknown>;
  end?(): Promise<void>;
}

export class Workers {
  readonly #host: WorkerHost;
  readonly #lanes: Promise<void>[] = [];
  /** Lanes asleep, each waiting for a wake-up. */
  readonly #sleepers: Array<() => void> = [];
  /** Ordered keys that may have a runnable event, and those a lane is draining now. */
  readonly #keys = new Set<string>();
  readonly #active = new Set<string>();
  /** There may be a due unordered pending event; the generation tells a stale "no" from a fresh hint. */
  #unordered = true;
  #unorderedGeneration = 0;
  #busy = 0;
  #closing = false;
  #stateWaiters: Array<() => void> = [];
  #pollTimer: NodeJS.Timeout | undefined;
  #refreshTimer: NodeJS.Timeout | undefined;
  #listener: ListenerClient | undefined;
  #listenerRelease: (() => Promise<void>) | undefined;
  #listenTimer: NodeJS.Timeout | undefined;
  #pendingEstimate = 0;

  constructor(host: WorkerHost) {
    this.#host = host;
  }

  /** Starts the lanes, the poll and (pg) the listener. */
  start(): void {
    const o = this.#host.options;
    if (o.mode === 'deferred') {
      this.#refreshPending();
      this.#refreshTimer = setInterval(() => this.#refreshPending(), PENDING_REFRESH_MS);
      this.#refreshTimer.unref();
    }
    // workers: 0 is an instance that only acknowledges (others apply): nothing more to start.
    if (o.workers === 0) return;
    for (let i = 0; i < o.workers; i++) this.#lanes.push(this.#lane());
    this.#pollTimer = setInterval(() => this.wake(null), o.pollIntervalMs);
    this.#pollTimer.unref();
    if (this.#host.database.kind === 'pg' && this.#host.database.pool) void this.#listen();
  }

  /** A runnable event of `key` (or an unordered one, for null) may be waiting: wake a lane. */
  wake(key: string | null): void {
    if (this.#closing) return;
    if (key === null) {
      this.#unordered = true;
      this.#unorderedGeneration++;
    } else if (this.#keys.size < MAX_KEY_HINTS) {
      this.#keys.add(key);
    }
    this.#signal();
  }

  /**
   * Pending events of this source, all instances: the count read every 500 ms, plus the events
   * this instance stored since, minus those it applied. Deliveries compare it with
   * `maxPending` without a query (a count(*) per delivery would cost a round trip and scan a
   * growing index exactly when the inbox is overloaded). Other instances' new events show
   * up at the next refresh, so the bound may be overshot by what they accept in 500 ms.
   */
  get pendingEstimate(): number {
    return this.#pendingEstimate;
  }

  /** A delivery of this instance was stored as pending. */
  notePending(): void {
    this.#pendingEstimate++;
  }

  /** Resolves when every lane is asleep with nothing known to do. */
  async idle(): Promise<void> {
    while (!this.#isIdle()) {
      await new Promise<void>((resolve) => this.#stateWaiters.push(resolve));
    }
  }

  /** Stops taking work, waits for the handlers in flight, stops the listener. */
  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    clearInterval(this.#pollTimer);
    clearInterval(this.#refreshTimer);
    clearTimeout(this.#listenTimer);
    this.#keys.clear();
    this.#unordered = false;
    for (const wake of this.#sleepers.splice(0)) wake();
    await Promise.all(this.#lanes);
    await this.#stopListening();
    this.#changed();
  }

  #isIdle(): boolean {
    return (
      this.#closing ||
      this.#lanes.length === 0 ||
      (this.#busy === 0 &&
        this.#sleepers.length === this.#lanes.length &&
        !this.#unordered &&
        this.#runnableKey() === undefined)
    );
  }

  #changed(): void {
    if (this.#stateWaiters.length === 0) return;
    for (const resolve of this.#stateWaiters.splice(0)) resolve();
  }

  #signal(): void {
    this.#sleepers.shift()?.();
  }

  #runnableKey(): string | undefined {
    for (const key of this.#keys) if (!this.#active.has(key)) return key;
    return undefined;
  }

  async #lane(): Promise<void> {
    while (!this.#closing) {
      const key = this.#runnableKey();
      if (key !== undefined) {
        this.#keys.delete(key);
        this.#active.add(key);
        // More hints than this lane can take: pass one on.
        if (this.#runnableKey() !== undefined || this.#unordered) this.#signal();
        this.#busy++;
        try {
          await this.drainKey(key);
        } catch (err) {
          this.#host.options.logger.error({ err, key }, 'webhook-inbox: worker drain failed');
        } finally {
          this.#active.delete(key);
          this.#busy--;
          this.#changed();
        }
        continue;
      }
      if (this.#unordered) {
        const generation = this.#unorderedGeneration;
        let didWork = false;
        this.#busy++;
        try {
          didWork = await this.#applyOneUnordered();
        } catch (err) {
          // The database is unreachable or the pool is exhausted: the poll will try again.
          this.#host.options.logger.error({ err }, 'webhook-inbox: worker failed');
        } finally {
          this.#busy--;
        }
        if (didWork) {
          // There may be more: wake another lane, so a backlog spreads to all of them.
          this.#signal();
        } else if (generation === this.#unorderedGeneration) {
          this.#unordered = false;
        }
        this.#changed();
        continue;
      }
      await new Promise<void>((resolve) => {
        this.#sleepers.push(resolve);
        this.#changed();
      });
    }
  }

  /**
   * Applies the key's runnable events in seq order, each in its own transaction, until the
   * next one is missing, not due, or held by someone else. Returns how many it applied.
   */
  async drainKey(key: string): Promise<number> {
    let applied = 0;
    for (;;) {
      const step = await this.#applyTurn(key);
      if (step.applied) applied++;
      if (!step.more || this.#closing) return applied;
    }
  }

  async #applyTurn(key: string): Promise<{ applied: boolean; more: boolean }> {
    const h = this.#host;
    const o = h.options;
    let taken: TurnEvent | undefined;
    let more = false;
    try {
      await h.database.kysely.transaction().execute(async (tx) => {
        taken = await h.takeTurn(tx, o.source, key, o.keepPayload);
        if (!taken) return;
        await h.runHandler(tx, {
          id: taken.id,
          source: o.source,
          key,
          seq: taken.seq,
          body: parseBody(taken.payload, taken.headers['content-type'], o.parse),
          rawBody: taken.payload,
          headers: taken.headers,
          attempt: taken.attempts + 1,
          receivedAt: taken.receivedAt,
        });
        // One round trip more than take_next: the price of not locking the key meanwhile.
        more = await h.advance(tx, o.source, key, taken.seq);
      });
      if (taken) this.#pendingEstimate = Math.max(0, this.#pendingEstimate - 1);
      return { applied: taken !== undefined, more };
    } catch (err) {
      if (!(err instanceof HandlerError) || !taken) throw err;
      const row = await this.#failed(taken, key, err);
      // onPoison 'skip' moved the cursor past it: the next seq may be runnable.
      return { applied: false, more: row?.drain === true };
    }
  }

  /** One transaction: take one due unordered pending event and run the handler. */
  async #applyOneUnordered(): Promise<boolean> {
    const h = this.#host;
    const o = h.options;
    let taken: PendingEvent | undefined;
    try {
      await h.database.kysely.transaction().execute(async (tx) => {
        taken = await h.takePending(tx, o.source, o.keepPayload);
        if (!taken) return;
        await h.runHandler(tx, {
          id: taken.id,
          source: o.source,
          key: null,
          seq: null,
          body: parseBody(taken.payload, taken.headers['content-type'], o.parse),
          rawBody: taken.payload,
          headers: taken.headers,
          attempt: taken.attempts + 1,
          receivedAt: taken.receivedAt,
        });
      });
      if (taken) this.#pendingEstimate = Math.max(0, this.#pendingEstimate - 1);
      return taken !== undefined;
    } catch (err) {
      if (!(err instanceof HandlerError) || !taken) throw err;
      await this.#failed(taken, null, err);
      return true;
    }
  }

  /**
   * The handler threw (or timed out): its transaction rolled back; count the attempt apart.
   * Known gap: between that rollback and this statement the event is due again, so another
   * worker may run it once more at once (the attempt is still counted, and exactly-once holds:
   * each run is its own transaction). Closing it needs the failure recorded in the handler's
   * transaction, after a savepoint: a round trip more per event, not done yet.
   */
  async #failed(
    taken: PendingEvent | TurnEvent,
    key: string | null,
    err: HandlerError,
  ): Promise<{ decision: string; drain: boolean } | undefined> {
    const h = this.#host;
    const o = h.options;
    o.logger.warn(
      { err: err.cause, id: taken.id, source: o.source },
      'webhook-inbox: handler failed in worker',
    );
    const row = await h
      .fail(h.database.kysely, {
        source: o.source,
        id: taken.id,
        key,
        seq: 'seq' in taken ? taken.seq : null,
        hash: taken.hash,
        payload: taken.payload,
        headers: taken.headers,
        error: h.errorMessage(err.cause),
        maxAttempts: o.maxAttempts,
        onPoison: o.onPoison,
        retryInMs: h.retryInMs(taken.attempts),
        receivedAt: taken.receivedAt,
      })
      .catch((failErr) => {
        o.logger.error({ err: failErr, id: taken.id }, 'webhook-inbox: could not record the failed attempt');
        return undefined;
      });
    if (row?.decision === 'dead') {
      this.#pendingEstimate = Math.max(0, this.#pendingEstimate - 1);
      o.logger.info({ id: taken.id, key, attempts: row.attempts }, 'webhook-inbox: dead-lettered (poison)');
    }
    return row;
  }

  #refreshPending(): void {
    const h = this.#host;
    h.countPending(h.database.kysely, h.options.source).then(
      (n) => {
        this.#pendingEstimate = n;
      },
      (err) => h.options.logger.debug({ err }, 'webhook-inbox: could not count pending events'),
    );
  }

  // ---- LISTEN/NOTIFY (pg) ---------------------------------------------------------------

  /**
   * A dedicated connection LISTENs on the inbox's channel. With a pg.Pool it is a client of
   * its own, built from the pool's settings, so no pool connection is taken for good; with
   * another pool-shaped object, one of its connections is held.
   */
  async #listen(): Promise<void> {
    const h = this.#host;
    const pool = h.database.pool as
      | (NonNullable<Database['pool']> & {
          Client?: new (options: unknown) => ListenerClient;
          options?: unknown;
        })
      | undefined;
    if (!pool || this.#closing) return;
    const channel = notifyChannel(h.tables, h.options.source);
    let client: ListenerClient | undefined;
    try {
      if (typeof pool.Client === 'function' && pool.options) {
        const own = new pool.Client(pool.options);
        client = own;
        own.on('error', () => {});
        await own.connect?.();
        this.#listenerRelease = async () => {
          await own.end?.();
        };
      } else {
        const pooled = (await pool.connect()) as ListenerClient;
        client = pooled;
        this.#listenerRelease = async () => pooled.release(true);
      }
      const listening = client;
      listening.on('notification', (msg) => {
        if (msg.channel === channel) this.wake(msg.payload ? msg.payload : null);
      });
      const lost = () => {
        if (this.#listener !== listening) return;
        void this.#stopListening();
        h.options.logger.warn({}, 'webhook-inbox: LISTEN connection lost; polling until it is back');
        this.#scheduleListen();
      };
      listening.on('error', lost);
      listening.on('end', lost);
      // The channel is `wi_` and 32 hex digits: an identifier that needs no quoting.
      await listening.query({ text: `listen ${channel}` });
      this.#listener = listening;
      if (this.#closing) await this.#stopListening();
      // Events stored while we were not listening: look once.
      this.wake(null);
    } catch (err) {
      h.options.logger.warn({ err }, 'webhook-inbox: cannot LISTEN; polling every pollIntervalMs');
      await this.#listenerRelease?.().catch(() => {});
      this.#listenerRelease = undefined;
      this.#scheduleListen();
    }
  }

  #scheduleListen(): void {
    if (this.#closing) return;
    this.#listenTimer = setTimeout(() => void this.#listen(), LISTEN_RETRY_MS);
    this.#listenTimer.unref();
  }

  async #stopListening(): Promise<void> {
    const release = this.#listenerRelease;
    this.#listener = undefined;
    this.#listenerRelease = undefined;
    await release?.().catch(() => {});
  }
}
