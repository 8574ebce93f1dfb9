import type { TracerProvider } from '@opentelemetry/api';
import { type BodySchema, resolveBodySchema, type StandardSchemaV1 } from './body-schema.js';
import type { DatabaseInput } from './database.js';
import { parseDuration } from './duration.js';
import { InboxOptionsError } from './errors.js';
import type { HandlerContext, InboxEvent } from './event.js';
import type { Logger } from './logger.js';
import type { MetricsOptions, RegistryLike } from './metrics.js';
import { bool, describe, headerName, IDENTIFIER, integer, oneOf } from './option-checks.js';
import type { Provider } from './providers.js';
import { type FieldSource, type Fields, type ResolvedSource, resolveSource } from './receive/field-source.js';
import type { Verify } from './receive/verify.js';
import type { RedisInput } from './redis-cache.js';

/**
 * Applies one event. `TBody` types `event.body`, `DB` types `context.tx` (a Kysely
 * `Transaction<DB>`).
 */
export type Handler<TBody = any, TResult = unknown, DB = any> = (
  event: InboxEvent<TBody>,
  context: HandlerContext<DB>,
) => TResult | Promise<TResult>;

/** The inbox's options. `TBody` is the type of `event.body`; `DB` the database interface `tx` is typed by. */
export interface InboxOptions<TBody = any, DB = any> {
  /**
   * Applies one event. Runs inside the transaction that claims the event: write through
   * `tx` and the side effect and the dedup record commit together or not at all. The
   * returned value (JSON) is stored and replayed to duplicates.
   */
  handle: Handler<TBody, unknown, DB>;
  /**
   * Where the inbox lives: a PostgreSQL connection string, a `pg.Pool`, a Kysely instance or a
   * PGlite instance; or `'memory'` for an embedded PGlite database in memory, which forgets
   * every event (and every write of the handler) when the process ends: for tests and demos.
   *
   * Left out (and no `dataDir`), the inbox refuses to start when `NODE_ENV=production`
   * (an unset `DATABASE_URL` must not silently lose data); elsewhere it runs in memory and
   * warns once.
   * @defaultValue required in production; otherwise `'memory'`, with a warning
   */
  db?: DatabaseInput | 'memory';
  /**
   * Directory of an embedded PGlite database on disk, kept across restarts, when `db` is not
   * given (one process at a time). @defaultValue none
   */
  dataDir?: string;
  /** Pool size when `db` is a connection string. @defaultValue 10 */
  poolSize?: number;
  /** Namespaces one inbox: ids and keys of different sources never collide. @defaultValue 'default' */
  source?: string;
  /** Postgres schema of the inbox tables. @defaultValue 'webhook_inbox' */
  schema?: string;
  /** Prefix of the inbox table names (`${prefix}events`, …). @defaultValue '' */
  tablePrefix?: string;
  /** Run the shipped migrations on first use. @defaultValue true */
  migrate?: boolean;
  /** Header names, case-insensitive. */
  headers?: { id?: string; key?: string; seq?: string };
  /**
   * Where the event id, ordering key and seq come from, when not from the `headers`: a header
   * name, a JSON pointer into the body (`'/sequence_id'`), `{ constant }` or a function of the
   * delivery. With a body source, that field's header is ignored.
   *
   * ```ts
   * fields: { id: '/idempotency_key', key: { constant: 'ledger' }, seq: '/sequence_id' }
   * ```
   * @defaultValue the `headers`
   */
  fields?: Fields;
  /**
   * When the id header is absent, derive the id from SHA-256 of the raw body instead of
   * answering 400. Only safe when the sender's bodies are unique per event.
   * @defaultValue false
   */
  idFromBody?: boolean;
  /** Largest body accepted, in bytes; larger is 413. @defaultValue 1048576 */
  maxBodyBytes?: number;
  /**
   * How long the whole body may take to arrive, from the moment the adapter hands the request
   * over; slower is 408 (and the connection is closed). A slow sender holds no in-flight slot
   * (`maxInFlight`) while the inbox waits for its first bytes. @defaultValue 5000
   */
  bodyTimeoutMs?: number;
  /**
   * How bodies reach the handler: `'auto'` parses JSON when the content type says JSON
   * (bad JSON is 400) and passes other bodies as a Buffer; `'json'` requires JSON;
   * `'raw'` always passes the Buffer. @defaultValue 'auto'
   */
  parse?: 'auto' | 'json' | 'raw';
  /**
   * Checks each body before anything is stored: any Standard Schema (zod, valibot, arktype…).
   * A body that fails is 422 naming the path of the first issue (`body /amount`), with nothing
   * stored and the handler not run; a body that passes reaches the handler as the schema's
   * output, which also types `event.body`.
   *
   * ```ts
   * createInbox({ bodySchema: z.object({ amount: z.number().int() }), handle(event) { event.body.amount } })
   * ```
   * @defaultValue none: any JSON body (see `parse`)
   */
  bodySchema?: StandardSchemaV1<unknown, TBody>;
  /**
   * How long a delivery waits for a concurrent delivery of the same id (or of the same key)
   * before answering 409 with Retry-After. @defaultValue 5000
   */
  lockTimeoutMs?: number;
  /**
   * A delivery that finds its id (or its ordering key) being processed by another delivery:
   * `'wait'` for it up to `lockTimeoutMs`, then answer what it decided (or 409); `'reject'`
   * answers 409 with Retry-After at once (a sender that retries in parallel gets its answer
   * without tying up a connection). @defaultValue 'wait'
   */
  onInFlight?: 'wait' | 'reject';
  /** Keep the payload of processed events (for audit or replay). @defaultValue false */
  keepPayload?: boolean;
  /** First expected seq of a new key: 1, or the seq of the first event seen. @defaultValue 1 */
  firstSeq?: 1 | 'first-seen';
  /** Most events one key may hold before deliveries are refused with 429. @defaultValue 1000 */
  maxHeldPerKey?: number;
  /** Largest distance past the next seq an event may be held at; further is 429. @defaultValue 10000 */
  maxSeqAhead?: number;
  /** How long the oldest held event of a key waits for its gap to fill. @defaultValue 30000 */
  gapTimeoutMs?: number;
  /** On gap timeout: skip the missing seqs and apply what is held, or block the key. @defaultValue 'skip' */
  onGapTimeout?: 'skip' | 'block';
  /** How often the sweeper runs; 0 turns it off. @defaultValue 1000 */
  sweepIntervalMs?: number;
  /** Handler failures before an event is dead-lettered as poison. @defaultValue 5 */
  maxAttempts?: number;
  /** An ordered poison event blocks its key (later events are held) or is skipped. @defaultValue 'block' */
  onPoison?: 'block' | 'skip';
  /** Backoff of background retries (drains): capped exponential with full jitter. */
  retryBaseMs?: number;
  /** @defaultValue 60000 */
  retryCapMs?: number;
  /**
   * How many processed events this instance remembers in memory (an LRU), so that their
   * duplicates are answered with no database round trip. 0 turns it off. Results over 2 KiB
   * as JSON are not cached. @defaultValue 5000
   */
  duplicateCacheSize?: number;
  /**
   * How long processed rows are kept (their ids are the dedup record of unordered events):
   * milliseconds or a duration string (`'7d'`, `'36h'`); `false` turns automatic pruning off.
   * The sweeper prunes older ones in small batches; held and dead rows and the keys table are
   * never pruned automatically. Shorter than 3 days (shorter than common sender retry windows)
   * warns at start-up. @defaultValue '7d'
   */
  retention?: number | string | false;
  /**
   * A pino-shaped logger: `info` for dead letters, gap timeouts and blocked keys, `debug` for
   * each delivery's outcome, `warn`/`error` for handler and infrastructure failures.
   * @defaultValue silent
   */
  logger?: Partial<Logger>;
  /**
   * Turns on the Redis fast path for duplicates: an ioredis client (the application keeps
   * owning it), or a `redis://` / `rediss://` URL (the inbox creates the client, and closes
   * it in `close()`). Redis is only a cache: when it is slow, down or empty, Postgres answers.
   * @defaultValue off
   */
  redis?: RedisInput;
  /**
   * Prefix of the Redis keys (`${prefix}${source}:${id}`). Inboxes on different databases
   * that share one Redis must use different prefixes. @defaultValue 'inbox:'
   */
  redisPrefix?: string;
  /** How long a delivery waits for Redis before asking Postgres instead. @defaultValue 50 */
  redisTimeoutMs?: number;
  /**
   * Prometheus metrics in a prom-client registry you pass:
   * `metrics: { registry: new Registry() }`. @defaultValue off
   */
  metrics?: MetricsOptions;
  /**
   * Where spans go. Without it, the global provider of `@opentelemetry/api` (a no-op until
   * an OpenTelemetry SDK is installed). @defaultValue the global tracer provider
   */
  tracerProvider?: TracerProvider;
  /**
   * Signature verification, run on the raw bytes before anything is parsed or stored; a
   * delivery that fails it is 401 and never claimed. `standardWebhooks({ secret })`,
   * `stripeSignature({ secret })`, `hmacSignature({ header, secret })`, or your own function
   * that throws `UnauthorizedDeliveryError`. @defaultValue off
   */
  verify?: Verify;
  /**
   * A provider preset from `webhook-inbox/providers`: its signature verification and where its
   * event id comes from (`fields.id` and `verify` may not be given with it; override through
   * the preset's own options).
   *
   * ```ts
   * provider: stripe({ secret: process.env.STRIPE_WEBHOOK_SECRET })
   * ```
   * @defaultValue none
   */
  provider?: Provider;
  /**
   * How events of one object are ordered. `{ policy: 'seq' }` (the default): contiguous seqs per
   * key (`X-Key`/`X-Seq` or `fields`), early ones held. `{ policy: 'latest', key, version }`:
   * never let an older event overwrite a newer one: per key, an event whose version is below
   * the last applied one is answered 200 `superseded`, recorded and not applied; equal
   * versions both apply, in arrival order. A `provider` fills `key` and `version`. Inline mode only.
   *
   * ```ts
   * order: { policy: 'latest', key: '/data/object/id', version: '/created' }
   * ```
   * @defaultValue { policy: 'seq' }
   */
  order?: { policy: 'seq' } | { policy: 'latest'; key?: FieldSource; version?: FieldSource };
  /**
   * `'inline'`: the handler runs inside the request and 200 means "applied". `'deferred'`:
   * the request only verifies, claims and stores the event as pending and answers 202; workers
   * apply it (slow handlers, senders with short timeouts). @defaultValue 'inline'
   */
  mode?: 'inline' | 'deferred';
  /**
   * Worker lanes in this instance: how many events it applies at once in the background
   * (Graphile Worker's `concurrency`). Each lane holds one connection while its handler runs.
   * @defaultValue deferred: half of `poolSize`, from 1 to 8; inline: 0
   */
  workers?: number;
  /**
   * How often idle workers look for due events without being woken (retries whose backoff
   * ended; events of other instances when LISTEN/NOTIFY is unavailable, as on PGlite).
   * @defaultValue 1000
   */
  pollIntervalMs?: number;
  /**
   * Deliveries this instance works on at once; one more is answered 503 with Retry-After at
   * once, before touching the database. @defaultValue 1000
   */
  maxInFlight?: number;
  /**
   * Longest wait for a free pool connection (own pg pool or PGlite) before a delivery is
   * answered 503 with Retry-After instead of queueing without bound. @defaultValue 5000
   */
  poolWaitTimeoutMs?: number;
  /**
   * A handler still running after this long is abandoned: its `signal` aborts, its transaction
   * rolls back, and the attempt counts towards `maxAttempts`. 0 turns it off. @defaultValue 30000
   */
  handlerTimeoutMs?: number;
  /**
   * Deferred mode: pending events (all instances) past which deliveries are answered 503 with
   * Retry-After. Checked against a count the workers refresh, not per delivery. @defaultValue 100000
   */
  maxPending?: number;
}

export interface ResolvedOptions {
  readonly handle: Handler;
  readonly db: DatabaseInput | undefined;
  readonly dataDir: string | undefined;
  readonly poolSize: number;
  readonly source: string;
  readonly schema: string;
  readonly tablePrefix: string;
  readonly migrate: boolean;
  readonly headers: { readonly id: string; readonly key: string; readonly seq: string };
  /** Where id, key and seq are read: `fields`, else the `headers`. */
  readonly fields: {
    readonly id: ResolvedSource;
    readonly key: ResolvedSource;
    readonly seq: ResolvedSource;
  };
  readonly idFromBody: boolean;
  readonly maxBodyBytes: number;
  readonly bodyTimeoutMs: number;
  readonly parse: 'auto' | 'json' | 'raw';
  readonly bodySchema: BodySchema | undefined;
  readonly lockTimeoutMs: number;
  readonly onInFlight: 'wait' | 'reject';
  readonly keepPayload: boolean;
  readonly firstSeq: 1 | 'first-seen';
  readonly maxHeldPerKey: number;
  readonly maxSeqAhead: number;
  readonly gapTimeoutMs: number;
  readonly onGapTimeout: 'skip' | 'block';
  readonly sweepIntervalMs: number;
  readonly maxAttempts: number;
  readonly onPoison: 'block' | 'skip';
  readonly retryBaseMs: number;
  readonly retryCapMs: number;
  readonly duplicateCacheSize: number;
  /** Milliseconds, or false when automatic pruning is off. */
  readonly retention: number | false;
  readonly logger: Logger;
  readonly redis: RedisInput | undefined;
  readonly redisPrefix: string;
  readonly redisTimeoutMs: number;
  readonly metrics: { readonly registry: RegistryLike } | undefined;
  readonly tracerProvider: TracerProvider | undefined;
  readonly verify: Verify | undefined;
  readonly provider: Provider | undefined;
  /** `seq`, or latest-wins with where its key and version are read. */
  readonly order:
    | { readonly policy: 'seq' }
    | { readonly policy: 'latest'; readonly key: ResolvedSource; readonly version: ResolvedSource };
  readonly mode: 'inline' | 'deferred';
  readonly workers: number;
  readonly pollIntervalMs: number;
  readonly maxInFlight: number;
  readonly poolWaitTimeoutMs: number;
  readonly handlerTimeoutMs: number;
  readonly maxPending: number;
}

const noop = () => {};

/** `db: 'memory'`: the embedded database in memory, chosen knowingly (no warning). */
const MEMORY = 'memory';
let warnedInMemory = false;

/**
 * No `db` and no `dataDir`. In production that is almost always an unset `DATABASE_URL`, and
 * running in memory would lose every event and every write of the handler on restart, the very
 * failure this library exists to prevent: refuse. Elsewhere (tests, a first try) run in memory,
 * and say so once per process, and to each inbox's logger.
 */
function noDatabaseGiven(logger: Partial<Logger> | undefined): void {
  if (process.env.NODE_ENV === 'production') {
    throw new InboxOptionsError(
      'db',
      "is required when NODE_ENV=production: without it, events and the handler's writes would be kept in memory and lost on restart. " +
        "Pass a PostgreSQL connection string or pool (e.g. db: process.env.DATABASE_URL, and check that it is set), or opt in to the embedded database with db: 'memory' or dataDir",
    );
  }
  const message =
    "webhook-inbox: no `db` option: events are kept in an in-memory database and lost when the process ends. Pass a PostgreSQL connection string (db: process.env.DATABASE_URL), or db: 'memory' to choose this knowingly";
  if (typeof logger?.warn === 'function') logger.warn({ db: undefined }, message);
  if (!warnedInMemory) {
    warnedInMemory = true;
    process.emitWarning(message, 'WebhookInboxWarning');
  }
}

/** Every option, checked and defaulted in one place. A bad value throws, naming the option. */
export function resolveOptions(input: InboxOptions): ResolvedOptions {
  if (!input || typeof input !== 'object') throw new InboxOptionsError('options', 'must be an object');
  const o = input as unknown as Record<string, unknown>;
  if (typeof o.handle !== 'function')
    throw new InboxOptionsError('handle', `must be a function; got ${describe(o.handle)}`);
  const source = o.source ?? 'default';
  if (
    typeof source !== 'string' ||
    source.length < 1 ||
    source.length > 100 ||
    !/^[\x21-\x7e]+$/.test(source)
  ) {
    throw new InboxOptionsError(
      'source',
      `must be 1-100 printable ASCII characters; got ${describe(source)}`,
    );
  }
  const schema = o.schema ?? 'webhook_inbox';
  if (typeof schema !== 'string' || !IDENTIFIER.test(schema)) {
    throw new InboxOptionsError(
      'schema',
      `must be a lower-case SQL identifier (a-z, 0-9, _; at most 40); got ${describe(schema)}`,
    );
  }
  const tablePrefix = o.tablePrefix ?? '';
  if (typeof tablePrefix !== 'string' || (tablePrefix !== '' && !IDENTIFIER.test(tablePrefix))) {
    throw new InboxOptionsError(
      'tablePrefix',
      `must be empty or a lower-case SQL identifier; got ${describe(tablePrefix)}`,
    );
  }
  if (o.dataDir !== undefined && (typeof o.dataDir !== 'string' || o.dataDir === '')) {
    throw new InboxOptionsError('dataDir', `must be a directory path; got ${describe(o.dataDir)}`);
  }
  if (o.dataDir !== undefined && o.db !== undefined) {
    throw new InboxOptionsError('dataDir', 'applies to the embedded database only; remove it or remove `db`');
  }
  if (o.db === undefined && o.dataDir === undefined) noDatabaseGiven(o.logger as Partial<Logger> | undefined);
  const h = (o.headers ?? {}) as Record<string, unknown>;
  if (typeof h !== 'object') throw new InboxOptionsError('headers', 'must be an object');
  const headers = {
    id: headerName(h.id, 'headers.id', 'idempotency-key'),
    key: headerName(h.key, 'headers.key', 'x-key'),
    seq: headerName(h.seq, 'headers.seq', 'x-seq'),
  };
  if (new Set(Object.values(headers)).size !== 3)
    throw new InboxOptionsError('headers', 'must name three different headers');
  const f = o.fields ?? {};
  if (typeof f !== 'object' || f === null) throw new InboxOptionsError('fields', 'must be an object');
  for (const name of Object.keys(f)) {
    if (name !== 'id' && name !== 'key' && name !== 'seq') {
      throw new InboxOptionsError(`fields.${name}`, 'is not a field; fields are id, key and seq');
    }
  }
  const provider = o.provider as Provider | undefined;
  if (provider !== undefined) {
    if (provider === null || typeof provider !== 'object' || typeof provider.verify !== 'function') {
      throw new InboxOptionsError(
        'provider',
        'must be a preset of webhook-inbox/providers, e.g. stripe({ secret })',
      );
    }
    if (o.verify !== undefined) {
      throw new InboxOptionsError(
        'verify',
        'is set by `provider`; give the secret to the preset, or drop `provider`',
      );
    }
    if ((f as Fields).id !== undefined) {
      throw new InboxOptionsError(
        'fields.id',
        "is set by `provider`; override it with the preset's `id` option",
      );
    }
  }
  const fieldSource = (name: 'id' | 'key' | 'seq'): ResolvedSource => {
    const given = name === 'id' && provider ? provider.id : (f as Record<string, unknown>)[name];
    return given === undefined
      ? { kind: 'header', name: headers[name], label: headers[name] }
      : resolveSource(given, `fields.${name}`);
  };
  const fields = { id: fieldSource('id'), key: fieldSource('key'), seq: fieldSource('seq') };
  const order = (o.order ?? { policy: 'seq' }) as { policy?: unknown; key?: unknown; version?: unknown };
  if (typeof order !== 'object' || order === null || (order.policy !== 'seq' && order.policy !== 'latest')) {
    throw new InboxOptionsError('order', "must be { policy: 'seq' } or { policy: 'latest', key, version }");
  }
  let resolvedOrder: ResolvedOptions['order'] = { policy: 'seq' };
  if (order.policy === 'latest') {
    const preset = provider?.order || undefined;
    const key = order.key ?? preset?.key;
    const version = order.version ?? preset?.version;
    if (key === undefined)
      throw new InboxOptionsError('order.key', 'is required (or a provider preset that has one)');
    if (version === undefined) {
      throw new InboxOptionsError('order.version', 'is required (or a provider preset that has one)');
    }
    if (o.mode === 'deferred') {
      throw new InboxOptionsError('order', "latest-wins runs in inline mode only; drop mode: 'deferred'");
    }
    resolvedOrder = {
      policy: 'latest',
      key: resolveSource(key as FieldSource, 'order.key'),
      version: resolveSource(version, 'order.version'),
    };
  }
  const logger = (o.logger ?? {}) as Partial<Logger>;
  if (typeof logger !== 'object') throw new InboxOptionsError('logger', 'must be a pino-shaped logger');
  const firstSeq = o.firstSeq === undefined ? 1 : o.firstSeq;
  if (firstSeq !== 1 && firstSeq !== 'first-seen') {
    throw new InboxOptionsError('firstSeq', `must be 1 or "first-seen"; got ${describe(firstSeq)}`);
  }
  const retryBaseMs = integer(o, 'retryBaseMs', 1000, 1, 3_600_000);
  const redis = o.redis as RedisInput | undefined;
  if (redis !== undefined) {
    if (typeof redis === 'string') {
      if (!/^rediss?:\/\/./.test(redis))
        throw new InboxOptionsError(
          'redis',
          `must be a redis:// or rediss:// URL or an ioredis client; got ${describe(redis.replace(/\/\/[^@/]*@/, '//…@'))}`,
        );
    } else if (
      !redis ||
      typeof redis !== 'object' ||
      typeof redis.get !== 'function' ||
      typeof redis.set !== 'function'
    ) {
      throw new InboxOptionsError(
        'redis',
        `must be a redis:// URL or an ioredis client (with get and set); got ${describe(redis)}`,
      );
    }
  }
  const redisPrefix = o.redisPrefix ?? 'inbox:';
  if (typeof redisPrefix !== 'string' || redisPrefix.length > 100) {
    throw new InboxOptionsError(
      'redisPrefix',
      `must be a string of at most 100 characters; got ${describe(redisPrefix)}`,
    );
  }
  const metrics = o.metrics as MetricsOptions | undefined;
  if (
    metrics !== undefined &&
    (!metrics ||
      typeof metrics !== 'object' ||
      typeof metrics.registry?.registerMetric !== 'function' ||
      typeof metrics.registry?.getSingleMetric !== 'function')
  ) {
    throw new InboxOptionsError('metrics', 'must be `{ registry }` with a prom-client Registry');
  }
  const tracerProvider = o.tracerProvider as TracerProvider | undefined;
  if (tracerProvider !== undefined && typeof tracerProvider?.getTracer !== 'function') {
    throw new InboxOptionsError(
      'tracerProvider',
      `must be an OpenTelemetry TracerProvider; got ${describe(tracerProvider)}`,
    );
  }
  const retryCapMs = integer(o, 'retryCapMs', 60_000, 1, 86_400_000);
  if (retryCapMs < retryBaseMs) throw new InboxOptionsError('retryCapMs', 'must be at least `retryBaseMs`');
  if (o.verify !== undefined && typeof o.verify !== 'function') {
    throw new InboxOptionsError(
      'verify',
      `must be a function, e.g. standardWebhooks({ secret }); got ${describe(o.verify)}`,
    );
  }
  let retention: number | false = 7 * 86_400_000;
  if (o.retention === false) retention = false;
  else if (o.retention !== undefined) {
    const ms = parseDuration(o.retention);
    if (ms === undefined || ms < 1000) {
      throw new InboxOptionsError(
        'retention',
        `must be a number of milliseconds (at least 1000), a duration such as '7d' or '36h', or false; got ${describe(o.retention)}`,
      );
    }
    retention = ms;
  }
  const poolSize = integer(o, 'poolSize', 10, 1, 1000);
  const mode = oneOf(o, 'mode', ['inline', 'deferred'] as const);
  const workers = integer(
    o,
    'workers',
    mode === 'deferred' ? Math.max(1, Math.min(8, Math.floor(poolSize / 2))) : 0,
    0,
    1000,
  );
  return {
    verify: (o.verify as Verify | undefined) ?? provider?.verify,
    provider,
    order: resolvedOrder,
    handle: o.handle as Handler,
    bodySchema: resolveBodySchema(o.bodySchema),
    // 'memory' was an explicit choice of what no `db` means: the embedded database, in memory.
    db: o.db === MEMORY ? undefined : (o.db as DatabaseInput | undefined),
    dataDir: o.dataDir as string | undefined,
    poolSize,
    source,
    schema,
    tablePrefix,
    migrate: bool(o, 'migrate', true),
    headers,
    fields,
    idFromBody: bool(o, 'idFromBody', false),
    maxBodyBytes: integer(o, 'maxBodyBytes', 1024 * 1024, 1, 256 * 1024 * 1024),
    bodyTimeoutMs: integer(o, 'bodyTimeoutMs', 5000, 1, 3_600_000),
    parse: oneOf(o, 'parse', ['auto', 'json', 'raw'] as const),
    lockTimeoutMs: integer(o, 'lockTimeoutMs', 5000, 1, 600_000),
    onInFlight: oneOf(o, 'onInFlight', ['wait', 'reject'] as const),
    keepPayload: bool(o, 'keepPayload', false),
    firstSeq,
    maxHeldPerKey: integer(o, 'maxHeldPerKey', 1000, 1, 1_000_000),
    maxSeqAhead: integer(o, 'maxSeqAhead', 10_000, 1, Number.MAX_SAFE_INTEGER),
    gapTimeoutMs: integer(o, 'gapTimeoutMs', 30_000, 1, 7 * 86_400_000),
    onGapTimeout: oneOf(o, 'onGapTimeout', ['skip', 'block'] as const),
    sweepIntervalMs: integer(o, 'sweepIntervalMs', 1000, 0, 3_600_000),
    maxAttempts: integer(o, 'maxAttempts', 5, 1, 1000),
    onPoison: oneOf(o, 'onPoison', ['block', 'skip'] as const),
    retryBaseMs,
    retryCapMs,
    duplicateCacheSize: integer(o, 'duplicateCacheSize', 5000, 0, 1_000_000),
    retention,
    logger: {
      debug: logger.debug?.bind(logger) ?? noop,
      info: logger.info?.bind(logger) ?? noop,
      warn: logger.warn?.bind(logger) ?? noop,
      error: logger.error?.bind(logger) ?? noop,
    },
    redis,
    redisPrefix,
    redisTimeoutMs: integer(o, 'redisTimeoutMs', 50, 1, 60_000),
    metrics: metrics ? { registry: metrics.registry } : undefined,
    tracerProvider,
    mode,
    workers,
    pollIntervalMs: integer(o, 'pollIntervalMs', 1000, 1, 3_600_000),
    maxInFlight: integer(o, 'maxInFlight', 1000, 1, 1_000_000),
    poolWaitTimeoutMs: integer(o, 'poolWaitTimeoutMs', 5000, 1, 600_000),
    handlerTimeoutMs: integer(o, 'handlerTimeoutMs', 30_000, 0, 86_400_000),
    maxPending: integer(o, 'maxPending', 100_000, 1, Number.MAX_SAFE_INTEGER),
  };
}
