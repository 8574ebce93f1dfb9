export type { RedisInput, RedisLike } from './cache.js';
export type { DatabaseInput, PGliteLike, PgClientLike, PgPoolLike } from './database.js';
export type { Delivery } from './delivery.js';
export {
  EmbeddedDatabaseUnavailableError,
  HandlerError,
  InboxError,
  InboxOptionsError,
  InvalidDeliveryError,
  OperationError,
  RawBodyUnavailableError,
  UnauthorizedDeliveryError,
} from './errors.js';
export type { HandlerContext, InboxEvent } from './event.js';
export type { InboxHealth, SweepReport } from './inbox.js';
export { backoffMs, createInbox, Inbox } from './inbox.js';
export type { InboxStats, MetricsOptions, RegistryLike } from './metrics.js';
export { METRIC_NAMES } from './metrics.js';
export { migrations } from './migrations.js';
export type {
  DeadLetter,
  DeadLetterFilter,
  Gap,
  InboxStatus,
  KeyDetail,
  KeySummary,
  OpenOperationsOptions,
  PruneOptions,
  PruneResult,
  ReplayOptions,
  ReplayResult,
  ReplaySelection,
  SkipResult,
} from './operations/index.js';
export { Operations, openOperations } from './operations/index.js';
export type { Handler, InboxOptions, Logger, ResolvedOptions } from './options.js';
export type { Outcome } from './outcome.js';
export { OutcomeKind } from './outcome.js';
export type { KeyState, StoredEvent } from './sql/inspect.js';
export { SpanAttributes } from './tracing.js';
export type { Secrets, VerifiableDelivery, VerifiedDelivery, Verify } from './verify.js';
export { hmacSignature, standardWebhooks, stripeSignature } from './verify.js';
