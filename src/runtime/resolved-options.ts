import type { TracerProvider } from '@opentelemetry/api';
import type { CitusOptions } from '../db/citus.js';
import type { DatabaseInput } from '../db/database.js';
import type { RedisInput } from '../dedup/redis-cache.js';
import type { DeliveryOptions } from '../delivery/delivery.js';
import type { Provider } from '../delivery/providers.js';
import type { RespondHook } from '../delivery/respond-hook.js';
import type { Verify } from '../delivery/verify.js';
import type { InboxLogger } from '../observability/logger.js';
import type { RegistryLike } from '../observability/metrics.js';
import type { BodySchema } from '../options/body-schema.js';
import type { OnDeadLetter } from '../options/dead-letter-hook.js';
import type { Handler } from '../options/event.js';
import type { ResolvedGroups } from '../options/groups.js';
import type { HandlerFor } from '../options/handlers.js';

/** The options after `resolveOptions`: every default applied, every value checked. */
export interface ResolvedOptions {
  /** The `handle` given, or undefined when `handlers` route instead. */
  readonly handle: Handler | undefined;
  /** The handler for an event's type (with `handle`, always it); undefined: the event is ignored. */
  readonly handlers: HandlerFor;
  readonly db: DatabaseInput | undefined;
  readonly dataDir: string | undefined;
  readonly poolSize: number;
  /** Deferred mode: connections reserved for acknowledgements (0: none, they share the pool). */
  readonly ackPoolSize: number;
  readonly source: string;
  readonly schema: string;
  readonly tablePrefix: string;
  readonly migrate: boolean;
  readonly citus: CitusOptions | undefined;
  readonly headers: { readonly id: string; readonly key: string; readonly seq: string };
  /** Where id, key and seq are read: `fields`, else the `headers`; the type from `fields` or the provider. */
  readonly fields: DeliveryOptions['fields'];
  readonly idFromBody: boolean;
  readonly maxBodyBytes: number;
  readonly bodyTimeoutMs: number;
  readonly parse: DeliveryOptions['parse'];
  readonly bodySchema: BodySchema | undefined;
  readonly respond: RespondHook | undefined;
  readonly lockTimeoutMs: number;
  readonly onInFlight: 'wait' | 'reject';
  readonly keepPayload: boolean;
  readonly firstSeq: 1 | 'first-seen';
  readonly maxHeldPerKey: number;
  readonly maxSeqAhead: number;
  readonly gapTimeoutMs: number;
  readonly onGapTimeout: 'skip' | 'block';
  readonly sweepIntervalMs: number;
  readonly retryFor: number;
  /** Undefined: only `retryFor` bounds the retries. */
  readonly maxAttempts: number | undefined;
  readonly onPoison: 'block' | 'skip';
  readonly retryBaseMs: number;
  readonly retryCapMs: number;
  readonly duplicateCacheSize: number;
  /** Milliseconds, or false when automatic pruning is off. */
  readonly retention: number | false;
  /** Milliseconds, or false: dead letters are kept. */
  readonly deadRetention: number | false;
  readonly onDeadLetter: OnDeadLetter | undefined;
  readonly logger: InboxLogger;
  readonly redis: RedisInput | undefined;
  readonly redisPrefix: string;
  readonly redisTimeoutMs: number;
  readonly metrics: { readonly registry: RegistryLike } | undefined;
  readonly tracerProvider: TracerProvider | undefined;
  readonly verify: Verify | undefined;
  readonly provider: Provider | undefined;
  /** Every header never stored: the built-in ones, the verifier's and `secretHeaders`. */
  readonly secretHeaders: ReadonlySet<string>;
  /** `seq`, or latest-wins with where its key and version are read. */
  readonly order: DeliveryOptions['order'];
  readonly mode: 'inline' | 'deferred';
  readonly workers: number;
  readonly groups: ResolvedGroups | undefined;
  readonly workerBatchSize: number;
  readonly pollIntervalMs: number;
  readonly maxInFlight: number;
  readonly poolWaitTimeoutMs: number;
  readonly handlerTimeoutMs: number;
  readonly maxPending: number;
}
