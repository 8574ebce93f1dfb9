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

/** The inbox's options; every time option takes milliseconds or a duration string (`'30s'`, `'7d'`). */
export interface InboxOptions<TBody = any, DB = any> {
  /**
   * Applies one event in the transaction that claims it; its result (JSON) is replayed to duplicates.
   * @defaultValue required, unless `handlers` is given
   */
  handle?: Handler<TBody, unknown, DB>;
  /**
   * A handler per event type: exact types, one-level families (`'customer.*'`) and `'*'`; the most
   * specific wins, and an event none takes is recorded `ignored`.
   *
   * ```ts
   * handlers: { 'invoice.paid': onInvoicePaid, 'customer.*': onCustomer, '*': audit }
   * ```
   * @defaultValue none: `handle` takes every event
   */
  handlers?: Handlers<any, DB>;
  /**
   * A PostgreSQL connection string, a `pg.Pool`, a Kysely instance, a PGlite instance, or `'memory'`.
   * @defaultValue required in production; otherwise `'memory'`, with a warning
   */
  db?: DatabaseInput | 'memory';
  /** Directory of an embedded PGlite database on disk, when `db` is not given. @defaultValue none */
  dataDir?: string;
  /** Pool size when `db` is a connection string. @defaultValue 10 */
  poolSize?: number;
  /**
   * Deferred mode: connections beside the pool, for what never waits for a handler; 0 shares the pool.
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
   * On a Citus cluster: the migration distributes the tables (not with `groups`).
   * @defaultValue undefined (the tables are not distributed)
   */
  citus?: CitusOptions;
  /** Header names, case-insensitive. */
  headers?: { id?: string; key?: string; seq?: string };
  /**
   * Where id, key and seq come from, when not from the `headers`: a header, a JSON pointer, `{ constant }`
   * or a function.
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
  /** `'auto'`: JSON when the content type says so, else a Buffer; `'json'`; `'raw'`. @defaultValue 'auto' */
  parse?: ParseMode;
  /**
   * Checks each body before it is stored: a Standard Schema (zod, valibot…) or a JSON Schema (Ajv);
   * a failure is 422, and the schema's output types `event.body`.
   *
   * ```ts
   * createInbox({ bodySchema: z.object({ amount: z.number().int() }), handle(event) { event.body.amount } })
   * ```
   * @defaultValue none: any JSON body (see `parse`)
   */
  bodySchema?: StandardSchemaV1<unknown, TBody> | JsonSchema;
  /**
   * Shapes what the sender receives (`{ status?, headers?, body? }`, or `undefined`); never the decision.
   *
   * ```ts
   * respond: (o) => (o.kind === 'pending' ? { status: 202, body: { status: 'buffered' } } : undefined)
   * ```
   * @defaultValue none: the answers of docs/outcomes.md
   */
  respond?: RespondHook<TBody>;
  /** How long a delivery waits for a concurrent one of its id or key before a 409. @defaultValue 5000 */
  lockTimeoutMs?: number | string;
  /**
   * An id or key another delivery holds: `'wait'` up to `lockTimeoutMs`, or `'reject'` (409).
   * @defaultValue 'wait'
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
   * How long, from its arrival, a failing event is retried before it is dead-lettered as poison.
   * @defaultValue '24h'
   */
  retryFor?: number | string;
  /** Failed runs that dead-letter an event even within `retryFor`. @defaultValue none: only `retryFor` */
  maxAttempts?: number;
  /** An ordered poison event blocks its key (later events are held) or is skipped. @defaultValue 'block' */
  onPoison?: 'block' | 'skip';
  /** After the n-th failure, wait randomly below min(`retryCapMs`, `retryBaseMs`·2^(n−1)). @defaultValue 1000 */
  retryBaseMs?: number | string;
  /** The longest backoff window between two retries of an event. @defaultValue 3600000 (1 h) */
  retryCapMs?: number | string;
  /** Processed events remembered in memory, to answer duplicates with no round trip. @defaultValue 5000 */
  duplicateCacheSize?: number;
  /** How long processed rows are kept (under 3 days warns); `false`: never pruned. @defaultValue '7d' */
  retention?: number | string | false;
  /** How long dead letters are kept; `false`: until an operator acts. @defaultValue false */
  deadRetention?: number | string | false;
  /**
   * Told once per dead letter, after its COMMIT; not awaited, what it throws is logged.
   *
   * ```ts
   * onDeadLetter: (event, cause) => alerts.send(`${event.id} dead (${event.reason}, ${cause.fingerprint})`)
   * ```
   */
  onDeadLetter?: OnDeadLetter;
  /**
   * A pino-shaped logger, or `false` for none.
   * @defaultValue the console: warnings, errors and the ready line to stderr
   */
  logger?: Partial<Logger> | false;
  /** Redis for duplicates: an ioredis client or a `redis://` URL; only a cache. @defaultValue off */
  redis?: RedisInput;
  /** Prefix of the Redis keys: inboxes of different databases on one Redis need their own. @defaultValue 'inbox:' */
  redisPrefix?: string;
  /** How long a delivery waits for Redis before asking Postgres instead. @defaultValue 50 */
  redisTimeoutMs?: number | string;
  /** Prometheus metrics in a prom-client registry: `{ registry: new Registry() }`. @defaultValue off */
  metrics?: MetricsOptions;
  /** Where spans go. @defaultValue the global tracer provider of `@opentelemetry/api` */
  tracerProvider?: TracerProvider;
  /** Verifies the raw bytes' signature before anything is stored; a failure is 401. @defaultValue off */
  verify?: Verify;
  /**
   * A preset of `webhook-inbox/providers`: its verification and its fields (override in its options).
   *
   * ```ts
   * provider: stripe({ secret: process.env.STRIPE_WEBHOOK_SECRET })
   * ```
   * @defaultValue none
   */
  provider?: Provider;
  /** More headers that carry a secret, never stored, besides the built-in ones. @defaultValue [] */
  secretHeaders?: readonly string[];
  /**
   * How events of one object are ordered: contiguous seqs per key (`'seq'`), or `'latest'`, where an event
   * older than its key's last applied version is `superseded`.
   *
   * ```ts
   * order: { policy: 'latest', key: '/data/object/id', version: '/created' }
   * ```
   * @defaultValue { policy: 'seq' }
   */
  order?: { policy: 'seq' } | { policy: 'latest'; key?: FieldSource; version?: FieldSource };
  /** `'inline'`: applied in the request; `'deferred'`: stored, 202, then applied. @defaultValue 'inline' */
  mode?: 'inline' | 'deferred';
  /**
   * Worker lanes in this instance, each holding a pool connection while its handler runs.
   * @defaultValue deferred: `poolSize` (half of it, 1 to 8, sharing the pool); inline: 0
   */
  workers?: number;
  /**
   * Tenants: an event's group, and per-group limits over every instance.
   * ```ts
   * groups: { by: 'x-shopify-shop-domain', concurrency: 2, rate: '2/s' }
   * ```
   */
  groups?: GroupsOption;
  /** Unordered events a busy lane applies in one transaction (at most 32; 1: off). @defaultValue 10 */
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
