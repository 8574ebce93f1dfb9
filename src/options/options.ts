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
 * The inbox's options. `TBody` is the type of `event.body`; `DB` the database interface `tx` is
 * typed by. Every time option (`…Ms`, `retryFor`, `retention`) takes milliseconds or a
 * duration string (`'500ms'`, `'30s'`, `'1h'`, `'7d'`). An option the inbox does not know
 * is an InboxOptionsError, with the nearest known name.
 */
export interface InboxOptions<TBody = any, DB = any> {
  /**
   * Applies one event. Runs inside the transaction that claims the event: write through
   * `tx` and the side effect and the dedup record commit together or not at all. The
   * returned value (JSON) is stored and replayed to duplicates. Give `handle` or `handlers`,
   * not both. @defaultValue required, unless `handlers` is given
   */
  handle?: Handler<TBody, unknown, DB>;
  /**
   * A handler per event type (`event.type`: the provider's, or `fields.type`), instead of one
   * `handle`: exact types, one-level families (`'customer.*'` matches `customer.created`, not
   * `customer.subscription.created`) and `'*'` for the rest; the most specific wins. Each runs
   * as `handle` would, in the claim's transaction. An event no handler takes is recorded
   * `ignored` (answered 200 `{"status":"ignored"}`), kept with its payload until retention, so
   * that `webhook-inbox ignored replay --type T` can apply it once a handler exists. Typed per
   * event by a map of types to bodies: `satisfies Handlers<StripeEventMap, DB>`
   * (docs/routing.md).
   *
   * ```ts
   * handlers: { 'invoice.paid': onInvoicePaid, 'customer.*': onCustomer, '*': audit }
   * ```
   * @defaultValue none: `handle` takes every event
   */
  handlers?: Handlers<any, DB>;
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
  /**
   * Deferred mode: connections of their own for what must never wait for a handler: the
   * acknowledgements (each delivery's claim, one short statement), the workers' coalesced
   * wake-up, the sweeper's pass and the pending count. Opened beside the pool (from the
   * connection string, or from a `pg.Pool`'s settings, as the LISTEN connection is), so the
   * worker lanes can hold every pool connection with their handlers while deliveries are still
   * acknowledged in milliseconds. 0 shares the pool (acknowledgements then queue behind busy
   * lanes). Not available with a Kysely instance or PGlite (one session): there the workers
   * default to half the pool. docs/deferred-mode.md, "Connections", says how to size both.
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
   * On a Citus cluster (docs/citus.md): the migration distributes the inbox's tables by their stream,
   * colocated with `colocateWith`, a distributed table of yours keyed by the events' keys, so that a
   * handler's writes for a key are on its events' shard. `db` connects to the coordinator.
   * Not with `groups`: a group's events span every shard.
   * @defaultValue undefined (the tables are not distributed)
   */
  citus?: CitusOptions;
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
  bodyTimeoutMs?: number | string;
  /**
   * How bodies reach the handler: `'auto'` parses JSON when the content type says JSON
   * (bad JSON is 400) and passes other bodies as a Buffer; `'json'` requires JSON;
   * `'raw'` always passes the Buffer. @defaultValue 'auto'
   */
  parse?: ParseMode;
  /**
   * Checks each body before anything is stored: any Standard Schema (zod, valibot, arktype…),
   * or a JSON Schema object (draft-07, 2019-09 or 2020-12 by its `$schema`; 2020-12 without
   * one), validated by Ajv with ajv-formats (optional peers: `npm install ajv ajv-formats`).
   * A body that fails is 422 naming the path of the first issue (`body /amount`), with nothing
   * stored and the handler not run; a body that passes reaches the handler as the schema's
   * output, which also types `event.body` (a JSON Schema leaves the body as sent, and types
   * nothing: give `TBody` yourself).
   *
   * ```ts
   * createInbox({ bodySchema: z.object({ amount: z.number().int() }), handle(event) { event.body.amount } })
   * createInbox({ bodySchema: { type: 'object', required: ['amount'], properties: { amount: { type: 'integer' } } }, handle })
   * ```
   * @defaultValue none: any JSON body (see `parse`)
   */
  bodySchema?: StandardSchemaV1<unknown, TBody> | JsonSchema;
  /**
   * Shapes what the sender receives for each outcome: return `{ status?, headers?, body? }` to
   * change the answer, or `undefined` for the default. `outcome.kind` says what the inbox
   * decided (`processed`, `duplicate`, `held`, `pending`, `dead-lettered`, … docs/outcomes.md);
   * `event` is the delivery's `{ id, key, seq, body, headers }`, or `undefined` when it was
   * refused before its id could be read. The decision itself never changes: a failure that left
   * nothing stored keeps a status of 400 or more. A hook that throws or returns something
   * invalid is logged and the default is answered. Synchronous; called once per delivery.
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
  /**
   * How long a delivery waits for a concurrent delivery of the same id (or of the same key)
   * before answering 409 with Retry-After. @defaultValue 5000
   */
  lockTimeoutMs?: number | string;
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
  /**
   * How long an event held behind a gap waits for it to fill, from its arrival: then the gap is
   * skipped (or blocks the key, `onGapTimeout`), every due gap of a key at once.
   * @defaultValue 30000
   */
  gapTimeoutMs?: number | string;
  /** On gap timeout: skip the missing seqs and apply what is held, or block the key. @defaultValue 'skip' */
  onGapTimeout?: 'skip' | 'block';
  /** How often the sweeper runs; 0 turns it off. @defaultValue 1000 */
  sweepIntervalMs?: number | string;
  // ---- The retry budget (src/apply/retry-schedule.ts) ----
  /**
   * How long an event whose handler fails is retried before it is dead-lettered as poison,
   * counted from its arrival: milliseconds or a duration (`'24h'`, `'3d'`). A time budget, as
   * providers have (Stripe retries for three days): a deploy, a migration or a downstream
   * outage costs retries, not dead letters. A handler that throws `RejectEvent` is
   * dead-lettered at once. @defaultValue '24h'
   */
  retryFor?: number | string;
  /**
   * Failed runs after which an event is dead-lettered as poison even within `retryFor`.
   * @defaultValue none: only `retryFor` bounds the retries
   */
  maxAttempts?: number;
  /** An ordered poison event blocks its key (later events are held) or is skipped. @defaultValue 'block' */
  onPoison?: 'block' | 'skip';
  /**
   * The first retry's backoff window: after the n-th failure, wait a random time below
   * min(`retryCapMs`, `retryBaseMs`·2^(n−1)) (full jitter). @defaultValue 1000
   */
  retryBaseMs?: number | string;
  /** The longest backoff window between two retries of an event. @defaultValue 3600000 (1 h) */
  retryCapMs?: number | string;
  // ---- end of the retry budget ----
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
   * How long dead letters are kept, counted from when they died (their last failed run; a late
   * one from when it arrived): milliseconds or a duration string (`'30d'`); `false` keeps them
   * until an operator replays, skips or purges them (`webhook-inbox dead purge`). Their
   * payloads may hold personal data: set it when the bodies do. Independent of `retention`
   * (processed rows) and of `keepPayload` (the payload of processed rows). @defaultValue false
   */
  deadRetention?: number | string | false;
  /**
   * Told once per dead letter, after the COMMIT that dead-lettered it, on every path (a
   * delivery, a drain, the sweeper, a worker, a late arrival): for an alert to Slack or
   * PagerDuty. Not awaited; what it throws is logged (`error`) and changes nothing.
   *
   * ```ts
   * onDeadLetter: (event, cause) => alerts.send(`${event.source}/${event.id} dead (${event.reason}, cause ${cause.fingerprint})`)
   * ```
   */
  onDeadLetter?: OnDeadLetter;
  /**
   * A pino-shaped logger: `debug` for each delivery's outcome and a failure's retries, `info`
   * for the one line that says the inbox is ready (its source, schema, mode and database,
   * never a password), gap timeouts and blocked keys, `warn` for an event's first handler failure and the first
   * signature mismatch, `error` for dead letters and infrastructure failures. `false`: nothing.
   * @defaultValue the console: warnings, errors and the ready line to stderr, one line each
   */
  logger?: Partial<Logger> | false;
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
  redisTimeoutMs?: number | string;
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
   * More request headers that carry a secret, never stored with an event (nor shown by the
   * console): besides `authorization`, `proxy-authorization`, `cookie`, every preset's token
   * and signature headers (`x-gitlab-token`, `stripe-signature`, …) and the headers your
   * `verify` declares (`headerToken` and `hmacSignature` declare theirs). Run `webhook-inbox
   * scrub-headers --secret-headers …` once to remove them from rows stored before.
   *
   * ```ts
   * secretHeaders: ['x-internal-api-key']
   * ```
   * @defaultValue []
   */
  secretHeaders?: readonly string[];
  /**
   * How events of one object are ordered. `{ policy: 'seq' }` (the default): contiguous seqs per
   * key (`X-Key`/`X-Seq` or `fields`), early ones held. `{ policy: 'latest', key, version }`:
   * never let an older event overwrite a newer one: per key, an event whose version is below
   * the last applied one is answered 200 `superseded`, recorded and not applied; equal
   * versions both apply, in arrival order. A `provider` fills `key` and `version`. In deferred
   * mode the delivery is answered 202 and the worker that takes it decides (a superseded event
   * is recorded with that result; its redelivery is answered 200 with it).
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
   * (Graphile Worker's `concurrency`). Each lane holds one pool connection while its handler
   * runs. In deferred mode, with connections of their own for acknowledgements (`ackPoolSize`),
   * every pool connection may be a lane's: as many handlers run at once as inline mode runs.
   * @defaultValue deferred: `poolSize` (half of it, from 1 to 8, when acknowledgements share
   * the pool); inline: 0
   */
  workers?: number;
  /**
   * Tenants: which group an event belongs to (a field source or a function; a `provider` may name
   * it), and per-group limits over every instance: workers take groups round-robin, at most
   * `concurrency` handlers and `rate` events per period of one group; inline, `inFlight`
   * deliveries per group (docs/groups.md).
   * ```ts
   * groups: { by: 'x-shopify-shop-domain', concurrency: 2, rate: '2/s' }
   * ```
   */
  groups?: GroupsOption;
  /**
   * Unordered pending events a worker lane takes and applies in one transaction, while every
   * lane is busy (a backlog): each runs under its own savepoint (a handler that throws undoes
   * only its own writes and is retried as ever), and they commit together, one COMMIT and one
   * round trip fewer per event. A redelivery of an event a batch holds waits for the batch (at
   * most `lockTimeoutMs`, then 409). At most 32: each event's savepoint is a subtransaction,
   * and past 64 in one transaction PostgreSQL slows every session's snapshots. 1 turns
   * batching off.
   * @defaultValue 10
   */
  workerBatchSize?: number;
  /**
   * How often idle workers look for due events without being woken (retries whose backoff
   * ended; events of other instances when LISTEN/NOTIFY is unavailable, as on PGlite).
   * @defaultValue 1000
   */
  pollIntervalMs?: number | string;
  /**
   * Deliveries this instance works on at once; one more is answered 503 with Retry-After at
   * once, before touching the database. @defaultValue 1000
   */
  maxInFlight?: number;
  /**
   * Longest wait for a free pool connection (own pg pool or PGlite) before a delivery is
   * answered 503 with Retry-After instead of queueing without bound. @defaultValue 5000
   */
  poolWaitTimeoutMs?: number | string;
  /**
   * A handler still running after this long is abandoned: its `signal` aborts, its transaction
   * rolls back, and the run counts as a failure (retried within `retryFor`). 0 turns it off. @defaultValue 30000
   */
  handlerTimeoutMs?: number | string;
  /**
   * Deferred mode: pending events (all instances) past which deliveries are answered 503 with
   * Retry-After. Checked against a count the workers refresh, not per delivery. @defaultValue 100000
   */
  maxPending?: number;
}
