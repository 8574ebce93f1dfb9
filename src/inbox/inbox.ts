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
  #closed: Promise<void> | undefined;
  /** The next attempt to start, after a failed one (cleared by `close()`). */
  #restart: NodeJS.Timeout | undefined;

  constructor(options: InboxOptions) {
    this.#rt = new Runtime(resolveOptions(options));
    this.#background = new Background(this.#rt);
    warnIfRetentionIsShort(this.options);
    this.#start(0);
  }

  /** Starts at once, so waiting events apply and a wrong database shows at boot; retried with backoff. */
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
        // One line per outage, shared with the deliveries' own.
        (firstTime(logger, 'database') ? logger.error : logger.debug)(
          { err: err.cause, source, retryInMs: delayMs },
          `${err.message}; retrying, deliveries are answered 503 meanwhile`,
        );
        this.#restart = setTimeout(() => this.#start(failures + 1), delayMs);
        this.#restart.unref();
      },
    );
  }

  get options(): ResolvedOptions {
    return this.#rt.options;
  }

  /** The inbox's qualified table and function names. */
  get tables(): Tables {
    return this.#rt.tables;
  }

  /** Resolves once the database is open and the background runs; rejects with `InboxStartError`. */
  async ready(): Promise<Database> {
    const { database } = await this.#rt.open().catch((err) => {
      throw startError(err);
    });
    if (!this.#rt.closing) this.#background.start();
    return database;
  }

  /** The Kysely instance the inbox uses (yours, when `db` was one), for your own tables. */
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

  /** Reads a request body from a stream (bounded by `maxBodyBytes`), then receives it: what adapters call. */
  receiveStream(headers: Delivery['headers'], stream: BodyStream): Promise<Outcome> {
    return receiveStream(this.#rt, this.#background, headers, stream);
  }

  /** The outcome for an error an adapter caught: 500, with nothing internal in it. */
  outcomeForError(err: unknown): Outcome {
    return outcomeForError(this.#rt, err);
  }

  /** Applies the key's waiting events in seq order until the next one is missing; how many it applied. */
  async drain(key: string, wait = false): Promise<number> {
    await this.ready();
    return this.#background.drain(key, wait);
  }

  /** One sweeper pass, now (it runs every `sweepIntervalMs` on its own). */
  async sweep(): Promise<SweepReport> {
    await this.ready();
    return this.#background.sweep();
  }

  /** Resolves when no drain, Redis write or worker started by this instance is running. */
  idle(): Promise<void> {
    return this.#background.idle();
  }

  /**
   * Shuts down: new deliveries get 503, those in flight finish, then what it opened is closed.
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

  /** Can this instance take deliveries? One bounded query and Redis PING; not `ok` only without Postgres. */
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
    const { source, lockTimeoutMs, secretHeaders } = this.options;
    this.#operations ??= new Operations(database.kysely, this.tables, source, lockTimeoutMs, secretHeaders);
    return this.#operations;
  }

  /** Dead letters, oldest first, with their payloads and whether each blocks its key. */
  async deadLetters(filter: Omit<DeadLetterFilter, 'source'> = {}): Promise<DeadLetter[]> {
    return (await this.operations()).deadLetters(filter);
  }

  /** One stored event by id, as a dead letter is shown (throws OperationError `not-found`). */
  async deadLetter(id: string): Promise<DeadLetter> {
    return (await this.operations()).deadLetter(id);
  }

  /**
   * Replays dead letters ({@link Operations.replay}) and applies them now; fix the handler first.
   *
   * ```ts
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
    // Due pending events are taken in due order: the re-queued ones after those already due.
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

  /** Re-queues the ignored events of `type` ({@link Operations.replayIgnored}) and applies them now. */
  async replayIgnored(type: string): Promise<IgnoredReplayResult> {
    const result = await (await this.operations()).replayIgnored({ type, source: this.options.source });
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

  /** {@link Operations.prune}, now (the sweeper does it by `retention`). */
  async prune(options: Omit<PruneOptions, 'source'>): Promise<PruneResult> {
    return (await this.operations()).prune(options);
  }

  /** Counts by status, blocked keys, oldest waiting ages, dead letters by reason. */
  async status(): Promise<InboxStatus> {
    return (await this.operations()).status();
  }

  /** One stored event by id. */
  async event(id: string): Promise<StoredEvent | undefined> {
    const filter = { id, limit: 1 };
    const [row] = await listEvents((await this.ready()).kysely, this.tables, this.options.source, filter);
    return row;
  }
}

/**
 * Creates an inbox. `createInbox<DB, Body>(…)` types the handler's `tx` and `event.body`.
 *
 * ```ts
 * const inbox = createInbox({ db: process.env.DATABASE_URL, handle: (event, { tx }) => save(tx, event) });
 * ```
 */
export function createInbox<DB = any, TBody = any>(options: InboxOptions<TBody, DB>): Inbox {
  return new Inbox(options as InboxOptions);
}
