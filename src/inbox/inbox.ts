/** The inbox: construction, `ready()`/`close()`, and the operator's methods (map: ARCHITECTURE.md). */
import type { Kysely } from 'kysely';
import { Background } from '../background/background.js';
import type { SweepReport } from '../background/sweeper.js';
import type { Database } from '../db/database.js';
import { migrateToLatest } from '../db/migrations.js';
import { type KeyState, keyState, listEvents, type StoredEvent } from '../db/sql/inspect.js';
import type { Tables } from '../db/sql/tables.js';
import type { Delivery } from '../delivery/request.js';
import type { InboxError } from '../errors.js';
import { firstTime, recovered } from '../observability/logger.js';
import {
  type DeadLetter,
  type DeadLetterFilter,
  type IgnoredEvent,
  type IgnoredFilter,
  type IgnoredReplayResult,
  type InboxStatus,
  type KeySummary,
  Operations,
  type PruneOptions,
  type PruneResult,
  type ReplayResult,
  type ReplaySelection,
  type SkipResult,
} from '../operations/index.js';
import type { InboxOptions } from '../options/options.js';
import type { Outcome } from '../outcome.js';
import { deliveriesSettled } from '../receive/admission.js';
import { receive, receiveStream } from '../receive/pipeline.js';
import type { BodyStream } from '../receive/raw-body.js';
import { outcomeForError } from '../receive/respond.js';
import { resolveOptions } from '../runtime/resolve-options.js';
import type { ResolvedOptions } from '../runtime/resolved-options.js';
import { Runtime } from '../runtime/runtime.js';
import { checkHealth, healthOutcome, type InboxHealth } from './health.js';
import { sayReady, startError, warnIfRetentionIsShort } from './start-warnings.js';

export class Inbox {
  readonly #rt: Runtime;
  #operations: Operations | undefined;
  readonly #background: Background;
  /** The shutdown, once `close()` started it. */
  #closed: Promise<void> | undefined;
  /** The next attempt to start, after a failed one (cleared by `close()`). */
  #restart: NodeJS.Timeout | undefined;

  constructor(options: InboxOptions) {
    this.#rt = new Runtime(resolveOptions(options));
    this.#background = new Background(this.#rt);
    warnIfRetentionIsShort(this.options);
    this.#start(0);
  }

  /**
   * Starts at construction, without waiting for a first delivery: after a restart, waiting events
   * are applied without new traffic, and a wrong `DATABASE_URL` is said at boot, not as 503s sent to
   * the provider. A failure is logged (the first loudly) and retried with backoff (1 s doubling to
   * 30 s); deliveries are answered 503 meanwhile, and each one tries to open the database too.
   */
  #start(failures: number): void {
    this.ready().then(
      (database) => {
        if (this.#rt.closing) return;
        sayReady(this.options, database, failures);
        recovered(this.options.logger, 'database');
      },
      (err: InboxError) => {
        if (this.#rt.closing) return;
        const { logger, source } = this.options;
        const delayMs = Math.min(30_000, 1000 * 2 ** Math.min(failures, 5));
        // One line per outage, shared with the deliveries' own (src/receive/respond.ts); the
        // message is the one ready() rejects with.
        (firstTime(logger, 'database') ? logger.error : logger.debug)(
          { err: err.cause, source, retryInMs: delayMs },
          `${err.message}; retrying, deliveries are answered 503 meanwhile`,
        );
        this.#restart = setTimeout(() => this.#start(failures + 1), delayMs);
        this.#restart.unref();
      },
    );
  }

  /** The options, checked and defaulted. */
  get options(): ResolvedOptions {
    return this.#rt.options;
  }

  /** The inbox's qualified table and function names. */
  get tables(): Tables {
    return this.#rt.tables;
  }

  /**
   * Resolves once the database is open and migrated (unless `migrate: false`) and the sweeper
   * and workers run; rejects with `InboxStartError` when that fails, naming the cause and
   * the fix (the inbox keeps retrying on its own). The inbox starts at construction: await this
   * at boot to fail loudly on a wrong database. Idempotent.
   */
  async ready(): Promise<Database> {
    const { database } = await this.#rt.open().catch((err) => {
      throw startError(err);
    });
    // A start that finished after close() began must not start loops close() already stopped.
    if (!this.#rt.closing) this.#background.start();
    return database;
  }

  /**
   * The Kysely instance the inbox uses (when `db` was a Kysely instance, that one, plugins and
   * all): create your own tables in the same database with it.
   */
  async kysely(): Promise<Kysely<any>> {
    return (await this.ready()).applicationKysely;
  }

  /** Runs the shipped migrations now (also done on first use unless `migrate: false`). */
  async migrate(): Promise<void> {
    const database = await this.ready();
    if (!this.options.migrate) await migrateToLatest(database.kysely, this.tables, this.options.citus);
  }

  /** Turns one delivery into its outcome. Never throws for a bad delivery. */
  receive(delivery: Delivery): Promise<Outcome> {
    return receive(this.#rt, this.#background, delivery);
  }

  /**
   * Reads a request body from a Node stream (bounded by `maxBodyBytes`), then receives it.
   * This is what the adapters call.
   */
  receiveStream(headers: Delivery['headers'], stream: BodyStream): Promise<Outcome> {
    return receiveStream(this.#rt, this.#background, headers, stream);
  }

  /**
   * The outcome for an error an adapter caught (a misconfigured body parser, a bug): 500
   * problem+json with nothing internal in it.
   */
  outcomeForError(err: unknown): Outcome {
    return outcomeForError(this.#rt, err);
  }

  /**
   * Applies the key's waiting events in seq order, each in its own transaction, until the next one
   * is missing (or the key is blocked, or someone else holds it). Returns how many it applied.
   */
  async drain(key: string, wait = false): Promise<number> {
    await this.ready();
    return this.#background.drain(key, wait);
  }

  /**
   * One sweeper pass, now: finishes drains a crash interrupted and applies gap timeouts.
   * Runs every `sweepIntervalMs` on its own; call it directly in tests and scripts.
   */
  async sweep(): Promise<SweepReport> {
    await this.ready();
    return this.#background.sweep();
  }

  /** Resolves when no drain, Redis write or worker started by this instance is running. */
  idle(): Promise<void> {
    return this.#background.idle();
  }

  /**
   * Shuts the inbox down, in order: takes no new delivery (503 + Retry-After, reason `closing`:
   * close the HTTP server first, see docs/operations.md); waits for the deliveries in flight to be
   * answered; stops the sweeper and the workers; waits for drains and Redis writes; then closes
   * what the inbox opened. An event not yet applied stays pending or held, for another instance or
   * this one's next start. Every call returns the same shutdown; after it, `ready()`, `kysely()`
   * and the operator methods reject with InboxError `closed`.
   *
   * ```ts
   * process.once('SIGTERM', () => server.close(() => inbox.close().then(() => process.exit(0))));
   * ```
   */
  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  async #close(): Promise<void> {
    this.#rt.closing = true;
    clearTimeout(this.#restart);
    await deliveriesSettled(this.#rt);
    await this.#background.close();
    await this.#rt.close();
  }

  /**
   * Can this instance take deliveries? One cheap query and one Redis PING, each bounded by a
   * short timeout. `ok` is false only when Postgres does not answer.
   *
   * ```ts
   * const { ok, redis, held, deadLetters } = await inbox.health();
   * ```
   */
  health(): Promise<InboxHealth> {
    return checkHealth(this.#rt);
  }

  /** `health()` as an outcome for adapters to write: 200 when ok (even degraded), else 503. */
  async healthOutcome(): Promise<Outcome> {
    return healthOutcome(await this.health());
  }

  /** The key's cursor, state and buffered events. */
  async keyState(key: string): Promise<KeyState | undefined> {
    return keyState((await this.ready()).kysely, this.tables, this.options.source, key);
  }

  /** Events held for `key` (or every key), in seq order. */
  async held(key?: string): Promise<StoredEvent[]> {
    return listEvents((await this.ready()).kysely, this.tables, this.options.source, { key, status: 'held' });
  }

  /** The operator actions, on this inbox's source: what the CLI runs, without draining. */
  async operations(): Promise<Operations> {
    const database = await this.ready();
    const o = this.options;
    // The inbox's lockTimeoutMs: a held key is waited for as a delivery waits for it.
    this.#operations ??= new Operations(
      database.kysely,
      this.tables,
      o.source,
      o.lockTimeoutMs,
      o.secretHeaders,
    );
    return this.#operations;
  }

  /**
   * Dead letters, oldest first, with their payloads and whether each blocks its key.
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
   * Replays dead letters ({@link Operations.replay}) and applies them now by the normal drain
   * path, in seq order, in the handler's transaction. Fix the handler first: a replay that fails
   * again is dead-lettered again when its budget (counted from its arrival) is spent.
   *
   * ```ts
   * const [r] = await inbox.replay('evt_123');   // r.status === 'processed'
   * await inbox.replay({ all: true, reason: 'poison', key: 'acct-7' });
   * ```
   */
  async replay(selection: ReplaySelection): Promise<ReplayResult[]> {
    const ops = await this.operations();
    const results = await ops.replay(selection);
    const requeued = results.filter((r) => r.outcome === 'requeued');
    for (const key of new Set(requeued.map((r) => r.key))) {
      if (key !== null) await this.drain(key, true);
    }
    // take_pending takes due pending events in due order: the re-queued ones after those already due.
    const unordered = requeued.filter((r) => r.key === null).length;
    if (unordered > 0) await this.#background.applyPending(unordered);
    const ids = requeued.map((r) => r.id);
    const now = await ops.statuses(this.options.source, ids);
    for (const r of results) if (now.has(r.id)) r.status = now.get(r.id)!;
    return results;
  }

  /** Events no handler takes (recorded `ignored`), newest first: `{ type }` narrows them. */
  async ignored(filter: Omit<IgnoredFilter, 'source'> = {}): Promise<IgnoredEvent[]> {
    return (await this.operations()).ignored(filter);
  }

  /**
   * Re-queues the ignored events of `type` ({@link Operations.replayIgnored}) and applies them now,
   * with the handler that takes it.
   *
   * ```ts
   * const { requeued } = await inbox.replayIgnored('invoice.paid');
   * ```
   */
  async replayIgnored(type: string): Promise<IgnoredReplayResult> {
    const result = await (await this.operations()).replayIgnored({ type, source: this.options.source });
    // As for `replay`: the re-queued ones after those already due.
    if (result.requeued > 0) await this.#background.applyPending(result.requeued);
    return result;
  }

  /** {@link Operations.skip}, then drains what follows. */
  async skip(
    target: { id: string; source?: string } | { key: string; source?: string },
  ): Promise<SkipResult & { drained: number }> {
    const result = await (await this.operations()).skip(target);
    return { ...result, drained: await this.drain(result.key, true) };
  }

  /** {@link Operations.unblock}, then drains what waits at the cursor. */
  async unblock(key: string, source?: string): Promise<KeySummary & { drained: number }> {
    const summary = await (await this.operations()).unblock(key, source);
    return { ...summary, drained: await this.drain(key, true) };
  }

  /** Keys that are blocked or hold events, longest waiting first. */
  async keys(filter: { blocked?: boolean; limit?: number } = {}): Promise<KeySummary[]> {
    return (await this.operations()).keys(filter);
  }

  /**
   * {@link Operations.prune}, now (the sweeper does it by `retention`).
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
 *
 * Typed: `createInbox<DB, Body>(…)` makes the handler's `tx` a `Transaction<DB>` (your Kysely
 * database interface, e.g. from `kysely-codegen`) and `event.body` a `Body`.
 */
export function createInbox<DB = any, TBody = any>(options: InboxOptions<TBody, DB>): Inbox {
  return new Inbox(options as InboxOptions);
}
