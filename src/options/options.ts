import type { TracerProvider } from '@opentelemetry/api';
import type { CitusOptions } from '../db/citus.js';
import type { DatabaseInput } from '../db/database.js';
import type { RedisInput } from '../dedup/redis-cache.js';
import type { FieldSource, Fields } from '../delivery/field-source.js';
import type { ParseMode } from '../delivery/payload.js';
import type { Provider } from '../delivery/providers.js';
import type { RespondHook } from '../delivery/respond-hook.js';
import type { Verify } from '../delivery/verify.js';
import type { Logger } from '../observability/logger.js';
import type { MetricsOptions } from '../observability/metrics.js';
import type { JsonSchema, StandardSchemaV1 } from './body-schema.js';
import type { OnDeadLetter } from './dead-letter-hook.js';
import type { Handler } from './event.js';
import type { GroupsOption } from './groups.js';
import type { Handlers } from './handlers.js';

/** `lockTimeoutMs`'s default, for the inbox and for operator actions given none. */
export const DEFAULT_LOCK_TIMEOUT_MS = 5000;

/**
 * The inbox's options. `TBody` types `event.body`, `DB` types `tx`. Every time option takes
 * milliseconds or a duration string (`'500ms'`, `'30s'`, `'1h'`, `'7d'`).
 */
export interface InboxOptions<TBody = any, DB = any> {
  /**
   * Applies one event, inside the transaction that claims it: write through `tx`, and the side
   * effect commits with the dedup record. The returned value (JSON) is replayed to duplicates.
   * @defaultValue required, unless `handlers` is given
   */
  handle?: Handler<TBody, unknown, DB>;
  /**
   * A handler per event type, instead of one `handle`: exact types, one-level families
   * (`'customer.*'`) and `'*'` for the rest; the most specific wins. An event no handler takes is
   * recorded `ignored` with its payload, for `webhook-inbox ignored replay --type T` later.
   *
   * ```ts
   * handlers: { 'invoice.paid': onInvoicePaid, 'customer.*': onCustomer, '*': audit }
   * ```
   * @defaultValue none: `handle` takes every event
   */
  handlers?: Handlers<any, DB>;
  /**
   * A PostgreSQL connection string, a `pg.Pool`, a Kysely instance or a PGlite instance; or
   * `'memory'`, an embedded database that forgets everything when the process ends. Left out
   * (and no `dataDir`), the inbox refuses to start when `NODE_ENV=production`.
   * @defaultValue required in production; otherwise `'memory'`, with a warning
   */
  db?: DatabaseInput | 'memory';
  /** Directory of an embedded PGlite database on disk, when `db` is not given. @defaultValue none */
  dataDir?: string;
  /** Pool size when `db` is a connection string. @defaultValue 10 */
  poolSize?: number;
  /**
   * Deferred mode: connections beside the pool for what must never wait for a handler (the
   * acknowledgements, wake-ups, the sweeper), so that worker lanes may hold every pool connection.
   * 0 shares the pool. Not available with a Kysely instance or PGlite.
   * @defaultValue 2 in deferred mode; unused inline
   */
  ackPoolSize?: number;
  /** Namespaces one inbox: ids and keys of different sources never collide. @defaultValue 'default' */
  source?: string;
  /** Postgres schema of the inbox tables. @defaultValue 'webhook_inbox' */
  schema?: string;
  /** Prefix of the inbox table names (`${prefix}events`, …). @defaultValue '' */
  tablePrefix?: string;
  /** Run the shipped migrations on first use. @defaultValue true */
  migrate?: boolean;
  /**
   * On a Citus cluster: the migration distributes the inbox's tables, colocated with
   * `colocateWith`, a distributed table of yours keyed by the events' keys. Not with `groups`: a group's events span every shard.
   * @defaultValue undefined (the tables are not distributed)
   */
  citus?: CitusOptions;
  /** Header names, case-insensitive. */
  headers?: { id?: string; key?: string; seq?: string };
  /**
   * Where the event id, ordering key and seq come from, when not from the `headers`: a header, a
   * JSON pointer into the body (`'/sequence_id'`), `{ constant }` or a function of the delivery.
   *
   * ```ts
   * fields: { id: '/idempotency_key', key: { constant: 'ledger' }, seq: '/sequence_id' }
   * ```
   * @defaultValue the `headers`
   */
  fields?: Fields;
  /** Without an id, the body's SHA-256 is the id (bodies must be unique per event). @defaultValue false */
  idFromBody?: boolean;
  /** Largest body accepted, in bytes; larger is 413. @defaultValue 1048576 */
  maxBodyBytes?: number;
  /** How long the whole body may take to arrive; slower is 408. @defaultValue 5000 */
  bodyTimeoutMs?: number | string;
  /**
   * `'auto'` parses JSON when the content type says JSON, else passes a Buffer; `'json'`
   * requires JSON; `'raw'` always passes the Buffer. @defaultValue 'auto'
   */
  parse?: ParseMode;
  /**
   * Checks each body before anything is stored: any Standard Schema (zod, valibot, arktype…), or
   * a JSON Schema object, validated by Ajv (optional peers: `npm install ajv ajv-formats`). A body
   * that fails is 422 naming the path of its first issue; one that passes reaches the handler as
   * the schema's output, which types `event.body`.
   *
   * ```ts
   * createInbox({ bodySchema: z.object({ amount: z.number().int() }), handle(event) { event.body.amount } })
   * createInbox({ bodySchema: { type: 'object', required: ['amount'], properties: { amount: { type: 'integer' } } }, handle })
   * ```
   * @defaultValue none: any JSON body (see `parse`)
   */
  bodySchema?: StandardSchemaV1<unknown, TBody> | JsonSchema;
  /**
   * Shapes what the sender receives: return `{ status?, headers?, body? }`, or `undefined` for the
   * default. The decision never changes: a failure that left nothing stored keeps a status of 400
   * or more. A hook that throws or returns something invalid is logged, and the default answered.
   *
   * ```ts
   * respond: (outcome) =>
   *   outcome.kind === 'held' || outcome.kind === 'pending'
   *     ? { status: 202, body: { status: 'buffered' } }
   *     : undefined
   * ```
   * @defaultValue none: the answers of docs/outcomes.md
   */
  respond?: RespondHook<TBody>;
  /** How long a delivery waits for a concurrent one of its id or key before a 409. @defaultValue 5000 */
  lockTimeoutMs?: number | string;
  /**
   * A delivery whose id or key another delivery is processing: `'wait'` up to `lockTimeoutMs`,
   * or `'reject'` with 409 and Retry-After at once. @defaultValue 'wait'
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
  /** How long an event held behind a gap waits for it to fill, from its arrival. @defaultValue 30000 */
  gapTimeoutMs?: number | string;
  /** On gap timeout: skip the missing seqs and apply what is held, or block the key. @defaultValue 'skip' */
  onGapTimeout?: 'skip' | 'block';
  /** How often the sweeper runs; 0 turns it off. @defaultValue 1000 */
  sweepIntervalMs?: number | string;
  /**
   * How long an event whose handler fails is retried, from its arrival, before it is
   * dead-lettered as poison: a time budget, so that an outage costs retries, not dead letters.
   * @defaultValue '24h'
   */
  retryFor?: number | string;
  /**
   * Failed runs after which an event is dead-lettered as poison even within `retryFor`.
   * @defaultValue none: only `retryFor` bounds the retries
   */
  maxAttempts?: number;
  /** An ordered poison event blocks its key (later events are held) or is skipped. @defaultValue 'block' */
  onPoison?: 'block' | 'skip';
  /** After the n-th failure, wait randomly below min(`retryCapMs`, `retryBaseMs`·2^(n−1)). @defaultValue 1000 */
  retryBaseMs?: number | string;
  /** The longest backoff window between two retries of an event. @defaultValue 3600000 (1 h) */
  retryCapMs?: number | string;
  /** Processed events remembered in memory, to answer duplicates with no round trip. @defaultValue 5000 */
  duplicateCacheSize?: number;
  /**
   * How long processed rows (the dedup record of unordered events) are kept; `false` turns
   * pruning off. Shorter than 3 days, common sender retry windows, warns. @defaultValue '7d'
   */
  retention?: number | string | false;
  /**
   * How long dead letters are kept, from when they died; `false` keeps them until an operator
   * replays, skips or purges them. Their payloads may hold personal data. @defaultValue false
   */
  deadRetention?: number | string | false;
  /**
   * Told once per dead letter, after its COMMIT, on every path: for an alert. Not awaited; what
   * it throws is logged.
   *
   * ```ts
   * onDeadLetter: (event, cause) => alerts.send(`${event.source}/${event.id} dead (${event.reason}, cause ${cause.fingerprint})`)
   * ```
   */
  onDeadLetter?: OnDeadLetter;
  /**
   * A pino-shaped logger: `debug` for each delivery, `info` for the ready line and blocked keys,
   * `warn` for a first handler failure, `error` for dead letters and infrastructure failures.
   * `false`: nothing.
   * @defaultValue the console: warnings, errors and the ready line to stderr, one line each
   */
  logger?: Partial<Logger> | false;
  /**
   * The Redis fast path for duplicates: an ioredis client, or a `redis://` URL (the inbox owns
   * that client). Only a cache: when Redis is slow, down or empty, Postgres answers.
   * @defaultValue off
   */
  redis?: RedisInput;
  /** Prefix of the Redis keys: inboxes of different databases on one Redis need their own. @defaultValue 'inbox:' */
  redisPrefix?: string;
  /** How long a delivery waits for Redis before asking Postgres instead. @defaultValue 50 */
  redisTimeoutMs?: number | string;
  /** Prometheus metrics in a prom-client registry: `{ registry: new Registry() }`. @defaultValue off */
  metrics?: MetricsOptions;
  /** Where spans go. @defaultValue the global tracer provider of `@opentelemetry/api` */
  tracerProvider?: TracerProvider;
  /**
   * Signature verification on the raw bytes, before anything is stored; a delivery that fails it
   * is 401. `standardWebhooks({ secret })`, `stripeSignature(…)`, `hmacSignature(…)`, or a
   * function of yours that throws `UnauthorizedDeliveryError`. @defaultValue off
   */
  verify?: Verify;
  /**
   * A provider preset from `webhook-inbox/providers`: its verification and where its event id
   * comes from (override through the preset's options, not `fields.id` or `verify`).
   *
   * ```ts
   * provider: stripe({ secret: process.env.STRIPE_WEBHOOK_SECRET })
   * ```
   * @defaultValue none
   */
  provider?: Provider;
  /**
   * More request headers that carry a secret, never stored, besides `authorization`, `cookie`,
   * the presets' signature headers and those your `verify` declares.
   *
   * ```ts
   * secretHeaders: ['x-internal-api-key']
   * ```
   * @defaultValue []
   */
  secretHeaders?: readonly string[];
  /**
   * How events of one object are ordered. `{ policy: 'seq' }`: contiguous seqs per key, early ones
   * held. `{ policy: 'latest', key, version }`: an event older than its key's last applied
   * version is recorded `superseded`, not applied. A `provider` fills `key` and `version`.
   *
   * ```ts
   * order: { policy: 'latest', key: '/data/object/id', version: '/created' }
   * ```
   * @defaultValue { policy: 'seq' }
   */
  order?: { policy: 'seq' } | { policy: 'latest'; key?: FieldSource; version?: FieldSource };
  /**
   * `'inline'`: the handler runs inside the request, and 200 means "applied". `'deferred'`: the
   * event is stored pending and answered 202; workers apply it. @defaultValue 'inline'
   */
  mode?: 'inline' | 'deferred';
  /**
   * Worker lanes in this instance: how many events it applies at once in the background, each
   * holding one pool connection while its handler runs.
   * @defaultValue deferred: `poolSize` (half of it, from 1 to 8, when acknowledgements share
   * the pool); inline: 0
   */
  workers?: number;
  /**
   * Tenants: which group an event belongs to, and per-group limits over every instance (workers
   * take groups round-robin).
   * ```ts
   * groups: { by: 'x-shopify-shop-domain', concurrency: 2, rate: '2/s' }
   * ```
   */
  groups?: GroupsOption;
  /**
   * Unordered pending events a busy worker lane applies in one transaction, each under its own
   * savepoint, committed together. At most 32; 1 turns batching off.
   * @defaultValue 10
   */
  workerBatchSize?: number;
  /** How often idle workers look for due events without being woken. @defaultValue 1000 */
  pollIntervalMs?: number | string;
  /** Deliveries this instance works on at once; one more is answered 503 at once. @defaultValue 1000 */
  maxInFlight?: number;
  /** Longest wait for a free pool connection before a delivery is answered 503. @defaultValue 5000 */
  poolWaitTimeoutMs?: number | string;
  /** A handler still running after this long is aborted; the run counts as failed. @defaultValue 30000 */
  handlerTimeoutMs?: number | string;
  /** Deferred mode: pending events (all instances) past which deliveries get 503. @defaultValue 100000 */
  maxPending?: number;
}
