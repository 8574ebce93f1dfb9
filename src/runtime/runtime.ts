/** The runtime of one inbox: what the pipeline, the apply path and the background loops work with. */
import type { Tracer } from '@opentelemetry/api';
import { type Database, openDatabase } from '../db/database.js';
import { migrateToLatest } from '../db/migrations.js';
import { createStatements, type Statements } from '../db/sql/statements.js';
import { createTables, type Tables } from '../db/sql/tables.js';
import type { TakenEvent } from '../db/sql/taken-event.js';
import { DuplicateOdds } from '../dedup/duplicate-odds.js';
import { ProcessedCache } from '../dedup/processed-cache.js';
import { connectRedis, RedisCache, type RedisLike } from '../dedup/redis-cache.js';
import { InboxError } from '../errors.js';
import {
  createMetrics,
  type InboxMetrics,
  type InboxStats,
  MAX_GROUP_LABELS,
  noMetrics,
} from '../observability/metrics.js';
import { createTracer } from '../observability/tracing.js';
import type { ResolvedOptions } from './resolved-options.js';

/** Redis entries live as long as processed rows (`retention`); without it, 7 days (then Postgres answers). */
const REDIS_TTL_WITHOUT_RETENTION_MS = 7 * 86_400_000;

function closedError(): InboxError {
  return new InboxError(
    'webhook-inbox: the inbox is closed (inbox.close() was called); create a new inbox to use the database again',
    'closed',
    503,
  );
}

interface Opened {
  readonly database: Database;
  readonly statements: Statements;
}

export class Runtime {
  readonly options: ResolvedOptions;
  readonly tables: Tables;
  /** `lockTimeoutMs` as Postgres spells it, for the claim and drains. */
  readonly lockTimeout: string;
  readonly tracer: Tracer;
  readonly processed: ProcessedCache;
  readonly duplicateOdds = new DuplicateOdds();
  metrics: InboxMetrics = noMetrics;
  redis: RedisCache | undefined;
  /** Pending events of this source, all instances: the workers' count, adjusted by this instance. */
  pendingEstimate = 0;
  inFlight = 0;
  closing = false;
  /** A misconfigured body parser was already reported with a process warning. */
  warnedRawBody = false;
  /** Work that outlives a response (drains, Redis writes): `idle()` and `close()` wait for it. */
  readonly background = new Set<Promise<unknown>>();
  #opening: Promise<Opened> | undefined;
  #closed = false;
  #opened: Opened | undefined;
  #telemetry: Promise<void> | undefined;
  #detachMetrics: (() => void) | undefined;

  constructor(options: ResolvedOptions) {
    this.options = options;
    this.tables = createTables(options.schema, options.tablePrefix);
    this.lockTimeout = `${options.lockTimeoutMs}ms`;
    this.tracer = createTracer(options.tracerProvider);
    this.processed = new ProcessedCache(options.duplicateCacheSize);
  }

  /** Opens the database and migrates (unless `migrate: false`). Idempotent; rejects once `close()` began. */
  open(): Promise<Opened> {
    if (this.#closed) return Promise.reject(closedError());
    // A failed open is not kept: the next delivery tries again.
    this.#opening ??= this.#open().catch((err) => {
      this.#opening = undefined;
      throw err;
    });
    return this.#opening;
  }

  get database(): Database {
    return this.#ready().database;
  }

  get statements(): Statements {
    return this.#ready().statements;
  }

  get isOpen(): boolean {
    return this.#opened !== undefined;
  }

  #ready(): Opened {
    if (!this.#opened) throw new Error('webhook-inbox: the inbox is not open yet (await inbox.ready())');
    return this.#opened;
  }

  async #open(): Promise<Opened> {
    await this.setUpTelemetry();
    const o = this.options;
    const database = await openDatabase(o.db, {
      dataDir: o.dataDir,
      poolSize: o.poolSize,
      poolWaitTimeoutMs: o.poolWaitTimeoutMs,
      ackPoolSize: o.ackPoolSize,
    });
    try {
      if (o.migrate) await migrateToLatest(database.kysely, this.tables, o.citus);
    } catch (err) {
      await database.destroy().catch(() => {});
      throw err;
    }
    this.#opened = {
      database,
      statements: createStatements(
        database.names,
        this.tables,
        database.ownDriver,
        database.kind === 'pglite',
      ),
    };
    return this.#opened;
  }

  /** Metrics and the Redis client: set up once, even when opening the database is retried. */
  setUpTelemetry(): Promise<void> {
    this.#telemetry ??= (async () => {
      const o = this.options;
      if (o.metrics) {
        const { metrics, detach } = await createMetrics(o.metrics.registry, o.source, () => this.stats());
        this.metrics = metrics;
        this.#detachMetrics = detach;
      }
      if (o.redis !== undefined) {
        const owned = typeof o.redis === 'string';
        const client = owned ? await connectRedis(o.redis as string, o.logger) : (o.redis as RedisLike);
        const metrics = this.metrics;
        this.redis = new RedisCache(
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

  async stats(): Promise<InboxStats> {
    const { database, statements } = await this.open();
    const stats = await statements.stats(database.kysely, this.options.source);
    if (!this.options.groups) return stats;
    const groups = await statements.busiestGroups(database.kysely, this.options.source, MAX_GROUP_LABELS);
    return { ...stats, groups };
  }

  track<T>(promise: Promise<T>): Promise<T> {
    this.background.add(promise);
    promise.finally(() => this.background.delete(promise)).catch(() => {});
    return promise;
  }

  /** An event committed as processed: remembered here and, while duplicates are likely, in Redis. */
  rememberProcessed(
    event: Pick<TakenEvent, 'id' | 'hash' | 'key' | 'seq'>,
    resultJson: string | undefined,
  ): void {
    this.processed.remember(event.id, event.hash, event.key, event.seq, resultJson);
    if (this.redis && this.duplicateOdds.likely) this.#writeToRedis(this.redis, event, resultJson);
  }

  /** A duplicate Postgres answered: remembered here and in Redis whatever the odds. */
  rememberDuplicate(event: Pick<TakenEvent, 'id' | 'hash' | 'key' | 'seq'>, result: unknown): void {
    const resultJson = result === null ? undefined : JSON.stringify(result);
    this.processed.remember(event.id, event.hash, event.key, event.seq, resultJson);
    if (this.redis) this.#writeToRedis(this.redis, event, resultJson);
  }

  #writeToRedis(
    redis: RedisCache,
    event: Pick<TakenEvent, 'id' | 'hash' | 'key' | 'seq'>,
    resultJson: string | undefined,
  ): void {
    this.track(redis.remember(event.id, { hash: event.hash, key: event.key, seq: event.seq }, resultJson));
  }

  /** Closes what `open()` and `setUpTelemetry()` opened; `open()` rejects from now on. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#opening) {
      const opened = await this.#opening.catch(() => undefined);
      await opened?.database.destroy();
    }
    await this.#telemetry?.catch(() => {});
    this.#detachMetrics?.();
    await this.redis?.close();
  }
}
