import type { TracerProvider } from '@opentelemetry/api';
import type { CitusOptions } from '../db/citus.js';
import { type DatabaseInput, opensConnections } from '../db/database.js';
import type { RedisInput } from '../dedup/redis-cache.js';
import {
  type FieldSource,
  type Fields,
  type ResolvedSource,
  resolveSource,
} from '../delivery/field-source.js';
import { secretHeaderSet } from '../delivery/payload.js';
import type { Provider } from '../delivery/providers.js';
import { resolveRespondHook } from '../delivery/respond-hook.js';
import type { Verify } from '../delivery/verify.js';
import { parseDuration } from '../duration.js';
import { InboxOptionsError } from '../errors.js';
import { consoleLogger, type Logger, silent } from '../observability/logger.js';
import type { MetricsOptions } from '../observability/metrics.js';
import { resolveBodySchema } from '../options/body-schema.js';
import type { OnDeadLetter } from '../options/dead-letter-hook.js';
import type { Handler } from '../options/event.js';
import { resolveGroups } from '../options/groups.js';
import { handleEverything, resolveHandlers } from '../options/handlers.js';
import {
  bool,
  describe,
  duration,
  headerName,
  headerNames,
  IDENTIFIER,
  integer,
  oneOf,
  optionalFunction,
} from '../options/option-checks.js';
import { DEFAULT_LOCK_TIMEOUT_MS, type InboxOptions } from '../options/options.js';
import { docsUrl } from '../outcome.js';
import type { ResolvedOptions } from './resolved-options.js';
import { rejectUnknownOptions } from './unknown-options.js';

/** `db: 'memory'`: the embedded database in memory, chosen knowingly (no warning). */
const MEMORY = 'memory';
let warnedInMemory = false;

/** No `db` nor `dataDir`: refused in production (likely an unset DATABASE_URL), else memory, said. */
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

/** A connection string as an error may echo it: without its password, nor its parameters (`?password=`). */
function redactedUrl(url: string): string {
  return url.replace(/^((?:[a-z][a-z0-9+.-]*:\/\/)?[^:/@]*):.*@/i, '$1:***@').replace(/\?.*$/, '?…');
}

/** Empty (an unset variable) or not a postgres:// URL would fail later, far from its cause. */
function checkDatabaseString(db: string): void {
  if (db === '') {
    throw new InboxOptionsError(
      'db',
      "is an empty string (is DATABASE_URL set?): pass a PostgreSQL connection string (postgres://user:password@host:5432/db), or db: 'memory' for the embedded database, chosen knowingly",
    );
  }
  if (db === MEMORY || /^postgres(ql)?:\/\//i.test(db)) return;
  const shown = redactedUrl(db);
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(db)?.[1];
  // `host:5432/db`, `user@host/db`: the URL without its scheme.
  const hint = scheme
    ? ` (${JSON.stringify(`${scheme}://`)} is not a PostgreSQL scheme)`
    : /^([^\s/@]+@)?[\w.-]+(:\d+)?(\/[^\s]*)?$/.test(db)
      ? ` (did you mean ${JSON.stringify(`postgres://${shown}`)}?)`
      : '';
  throw new InboxOptionsError(
    'db',
    `must be a postgres:// or postgresql:// URL (postgres://user:password@host:5432/db), 'memory', a pg.Pool, a Kysely instance or a PGlite instance; got ${JSON.stringify(shown)}${hint}`,
  );
}

/** Each batched event is a subtransaction; past 64, snapshots overflow to pg_subtrans. */
const MAX_WORKER_BATCH = 32;

/** Every option, checked and defaulted in one place. A bad value throws, naming the option. */
export function resolveOptions(input: InboxOptions): ResolvedOptions {
  if (!input || typeof input !== 'object') throw new InboxOptionsError('options', 'must be an object');
  const o = { ...(input as unknown as Record<string, unknown>) };
  rejectUnknownOptions(o);
  if (typeof o.db === 'string') checkDatabaseString(o.db);
  if (o.handle !== undefined && o.handlers !== undefined) {
    throw new InboxOptionsError('handlers', 'is an alternative to `handle`; give one of them, not both');
  }
  if (o.handlers === undefined && typeof o.handle !== 'function')
    throw new InboxOptionsError(
      'handle',
      `must be a function (or give \`handlers\`, one per event type); got ${describe(o.handle)}`,
    );
  const handlers =
    o.handlers === undefined ? handleEverything(o.handle as Handler) : resolveHandlers(o.handlers);
  // Two providers on one database never share ids.
  const source = o.source ?? (o.provider as Provider | undefined)?.name ?? 'default';
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
  if (o.db === undefined && o.dataDir === undefined) {
    noDatabaseGiven(o.logger as Partial<Logger> | undefined);
  }
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
    if (name !== 'id' && name !== 'key' && name !== 'seq' && name !== 'type') {
      throw new InboxOptionsError(`fields.${name}`, 'is not a field; fields are id, key, seq and type');
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
    for (const name of ['id', 'type'] as const) {
      if ((f as Fields)[name] !== undefined) {
        throw new InboxOptionsError(
          `fields.${name}`,
          `is set by \`provider\`; override it with the preset's \`${name}\` option`,
        );
      }
    }
  }
  const fieldSource = (name: 'id' | 'key' | 'seq'): ResolvedSource => {
    const given = name === 'id' && provider ? provider.id : (f as Record<string, unknown>)[name];
    return given === undefined
      ? { kind: 'header', name: headers[name], label: headers[name] }
      : resolveSource(given, `fields.${name}`);
  };
  const typeGiven = provider ? provider.type : (f as Fields).type;
  const fields = {
    id: fieldSource('id'),
    key: fieldSource('key'),
    seq: fieldSource('seq'),
    // No header by default: an event without a type source has none (null).
    type: typeGiven === undefined ? undefined : resolveSource(typeGiven, 'fields.type'),
  };
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
    resolvedOrder = {
      policy: 'latest',
      key: resolveSource(key as FieldSource, 'order.key'),
      version: resolveSource(version, 'order.version'),
    };
  }
  // Loud by default: no `logger` is the console; false is silence.
  const defaultLogger = o.logger === undefined ? consoleLogger() : undefined;
  const logger = (defaultLogger ?? (o.logger === false ? {} : o.logger)) as Partial<Logger>;
  if (typeof logger !== 'object' || logger === null) {
    throw new InboxOptionsError(
      'logger',
      `must be a pino-shaped logger (debug, info, warn, error), or false for none; got ${describe(o.logger)}`,
    );
  }
  const firstSeq = o.firstSeq === undefined ? 1 : o.firstSeq;
  if (firstSeq !== 1 && firstSeq !== 'first-seen') {
    throw new InboxOptionsError('firstSeq', `must be 1 or "first-seen"; got ${describe(firstSeq)}`);
  }
  const retryBaseMs = duration(o, 'retryBaseMs', 1000, 1, 3_600_000);
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
  const retryCapMs = duration(o, 'retryCapMs', 3_600_000, 1, 86_400_000);
  if (retryCapMs < retryBaseMs) throw new InboxOptionsError('retryCapMs', 'must be at least `retryBaseMs`');
  const retryFor = parseDuration(o.retryFor ?? '24h');
  if (retryFor === undefined || retryFor > 30 * 86_400_000) {
    throw new InboxOptionsError(
      'retryFor',
      `must be a number of milliseconds or a duration such as '24h' or '3d', at most 30 days; got ${describe(o.retryFor)}`,
    );
  }
  const maxAttempts = o.maxAttempts === undefined ? undefined : integer(o, 'maxAttempts', 0, 1, 1000);
  const verify =
    optionalFunction<Verify>(o, 'verify', ', e.g. standardWebhooks({ secret })') ?? provider?.verify;
  const retention = retentionOf(o, 'retention', 7 * 86_400_000);
  const deadRetention = retentionOf(o, 'deadRetention', false);
  const onDeadLetter = optionalFunction<OnDeadLetter>(o, 'onDeadLetter', ' (event, cause) => …');
  if (o.groups !== undefined && o.citus !== undefined) {
    // The grouped take locks a group's events across every shard at once, which Citus refuses.
    throw new InboxOptionsError(
      'groups',
      `cannot be combined with \`citus\`: a group spans every shard (${docsUrl('citus.md')}); remove one of them`,
    );
  }
  const poolSize = integer(o, 'poolSize', 10, 1, 1000);
  const mode = oneOf(o, 'mode', ['inline', 'deferred'] as const);
  // Sharing the pool with acknowledgements, the lanes get half of it.
  const ackPoolSize =
    mode === 'deferred' && opensConnections(o.db === MEMORY ? undefined : o.db)
      ? integer(o, 'ackPoolSize', 2, 0, 100)
      : 0;
  if (mode !== 'deferred') integer(o, 'ackPoolSize', 0, 0, 100);
  const workers = integer(
    o,
    'workers',
    mode === 'deferred'
      ? ackPoolSize > 0
        ? poolSize
        : Math.max(1, Math.min(8, Math.floor(poolSize / 2)))
      : 0,
    0,
    1000,
  );
  const secretHeaders = secretHeaderSet(headerNames(o.secretHeaders, 'secretHeaders'), verify?.secretHeaders);
  if (secretHeaders.has('content-type')) {
    throw new InboxOptionsError('secretHeaders', 'may not name content-type: a stored event is parsed by it');
  }
  return {
    verify,
    provider,
    secretHeaders,
    order: resolvedOrder,
    handle: o.handle as Handler | undefined,
    handlers,
    bodySchema: resolveBodySchema(o.bodySchema),
    respond: resolveRespondHook(o.respond),
    db: o.db === MEMORY ? undefined : (o.db as DatabaseInput | undefined),
    dataDir: o.dataDir as string | undefined,
    poolSize,
    ackPoolSize,
    source,
    schema,
    tablePrefix,
    migrate: bool(o, 'migrate', true),
    citus: resolveCitus(o.citus),
    headers,
    fields,
    idFromBody: bool(o, 'idFromBody', false),
    maxBodyBytes: integer(o, 'maxBodyBytes', 1024 * 1024, 1, 256 * 1024 * 1024),
    bodyTimeoutMs: duration(o, 'bodyTimeoutMs', 5000, 1, 3_600_000),
    parse: oneOf(o, 'parse', ['auto', 'json', 'raw'] as const),
    lockTimeoutMs: duration(o, 'lockTimeoutMs', DEFAULT_LOCK_TIMEOUT_MS, 1, 600_000),
    onInFlight: oneOf(o, 'onInFlight', ['wait', 'reject'] as const),
    keepPayload: bool(o, 'keepPayload', false),
    firstSeq,
    maxHeldPerKey: integer(o, 'maxHeldPerKey', 1000, 1, 1_000_000),
    maxSeqAhead: integer(o, 'maxSeqAhead', 10_000, 1, Number.MAX_SAFE_INTEGER),
    gapTimeoutMs: duration(o, 'gapTimeoutMs', 30_000, 1, 7 * 86_400_000),
    onGapTimeout: oneOf(o, 'onGapTimeout', ['skip', 'block'] as const),
    sweepIntervalMs: duration(o, 'sweepIntervalMs', 1000, 0, 3_600_000),
    retryFor,
    maxAttempts,
    onPoison: oneOf(o, 'onPoison', ['block', 'skip'] as const),
    retryBaseMs,
    retryCapMs,
    duplicateCacheSize: integer(o, 'duplicateCacheSize', 5000, 0, 1_000_000),
    retention,
    deadRetention,
    onDeadLetter,
    logger: {
      debug: logger.debug?.bind(logger) ?? silent,
      info: logger.info?.bind(logger) ?? silent,
      notice: defaultLogger?.notice ?? logger.info?.bind(logger) ?? silent,
      warn: logger.warn?.bind(logger) ?? silent,
      error: logger.error?.bind(logger) ?? silent,
    },
    redis,
    redisPrefix,
    redisTimeoutMs: duration(o, 'redisTimeoutMs', 50, 1, 60_000),
    metrics: metrics ? { registry: metrics.registry } : undefined,
    tracerProvider,
    mode,
    workers,
    groups: resolveGroups(o.groups, provider?.group),
    workerBatchSize: integer(o, 'workerBatchSize', 10, 1, MAX_WORKER_BATCH),
    pollIntervalMs: duration(o, 'pollIntervalMs', 1000, 1, 3_600_000),
    maxInFlight: integer(o, 'maxInFlight', 1000, 1, 1_000_000),
    poolWaitTimeoutMs: duration(o, 'poolWaitTimeoutMs', 5000, 1, 600_000),
    handlerTimeoutMs: duration(o, 'handlerTimeoutMs', 30_000, 0, 86_400_000),
    maxPending: integer(o, 'maxPending', 100_000, 1, Number.MAX_SAFE_INTEGER),
  };
}

/** A retention option: milliseconds (at least a second), a duration string, or false. */
function retentionOf(o: Record<string, unknown>, name: string, fallback: number | false): number | false {
  const value = o[name];
  if (value === undefined) return fallback;
  if (value === false) return false;
  const ms = parseDuration(value as number | string);
  if (ms === undefined || ms < 1000) {
    throw new InboxOptionsError(
      name,
      `must be a number of milliseconds (at least 1000), a duration such as '7d' or '36h', or false; got ${describe(value)}`,
    );
  }
  return ms;
}

/** `citus`: an object with at most `colocateWith`, a table name (`orders`, `public.orders`). */
function resolveCitus(citus: unknown): CitusOptions | undefined {
  if (citus === undefined) return undefined;
  if (citus === null || typeof citus !== 'object' || Array.isArray(citus)) {
    throw new InboxOptionsError(
      'citus',
      `must be an object ({ colocateWith?: 'orders' }); got ${describe(citus)}`,
    );
  }
  for (const name of Object.keys(citus)) {
    if (name !== 'colocateWith')
      throw new InboxOptionsError(`citus.${name}`, 'is not an option of citus (it has colocateWith)');
  }
  const { colocateWith } = citus as { colocateWith?: unknown };
  if (colocateWith !== undefined && (typeof colocateWith !== 'string' || !TABLE_NAME.test(colocateWith))) {
    throw new InboxOptionsError(
      'citus.colocateWith',
      `must name a distributed table, as table or schema.table in lower case; got ${describe(colocateWith)}`,
    );
  }
  return colocateWith === undefined ? {} : { colocateWith };
}

/** A table as `citus.colocateWith` names it (the CLI's `migrate --colocate-with` too). */
export const TABLE_NAME = /^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/;
