export type { SweepReport } from './background/sweeper.js';
export type {
  BodySchema,
  JsonSchema,
  StandardIssue,
  StandardResult,
  StandardSchemaV1,
} from './body-schema.js';
export type { DatabaseInput } from './database.js';
export type { DeadLetterCause, DeadLetterEvent, OnDeadLetter } from './dead-letter-hook.js';
export type { PGliteLike, PgClientLike, PgPoolLike } from './drivers/shapes.js';
export {
  EmbeddedDatabaseUnavailableError,
  HandlerError,
  InboxError,
  InboxOptionsError,
  InvalidDeliveryError,
  OperationError,
  RawBodyUnavailableError,
  RejectEvent,
  RetryLater,
  UnauthorizedDeliveryError,
} from './errors.js';
export type { Handler, HandlerContext, InboxEvent } from './event.js';
export type {
  EventMapOf,
  EventTypeMap,
  HandlerFor,
  HandlerPattern,
  Handlers,
  PatternTypes,
  WildcardOf,
} from './handlers.js';
export type { InboxHealth } from './health.js';
export { createInbox, Inbox } from './inbox.js';
export type {
  InboxDatabase,
  InboxEventsTable,
  InboxGapsTable,
  InboxKeysTable,
  Int8,
} from './inbox-tables.js';
export type { Logger } from './logger.js';
export type { InboxStats, MetricsOptions, RegistryLike } from './metrics.js';
export { METRIC_NAMES } from './metrics.js';
export { migrations } from './migrations.js';
export type {
  BatchRef,
  DeadLetter,
  DeadLetterFilter,
  DeadLetterGroup,
  Gap,
  IgnoredEvent,
  IgnoredFilter,
  IgnoredReplayResult,
  IgnoredType,
  InboxStatus,
  KeyDetail,
  KeySummary,
  LockWaitOptions,
  OpenOperationsOptions,
  PruneOptions,
  PruneResult,
  PurgeOptions,
  PurgeResult,
  ReplayOptions,
  ReplayResult,
  ReplaySelection,
  ScrubOptions,
  ScrubResult,
  Selection,
  SkipResult,
} from './operations/index.js';
export { Operations, openOperations } from './operations/index.js';
export type { InboxOptions } from './options.js';
export type { Outcome } from './outcome.js';
export { OutcomeKind, responseText } from './outcome.js';
export { type ParseMode, SECRET_HEADERS } from './payload.js';
export type { Provider } from './providers.js';
export type { FieldDelivery, FieldSource, Fields, ResolvedSource } from './receive/field-source.js';
export type { Delivery } from './receive/request.js';
export type { RespondEvent, RespondHook, ResponseShape } from './receive/respond-hook.js';
export type { Secrets, VerifiableDelivery, VerifiedDelivery, Verify } from './receive/verify.js';
export {
  headerToken,
  hmacSignature,
  paddleSignature,
  slackSignature,
  standardWebhooks,
  stripeSignature,
} from './receive/verify.js';
export type { RedisInput, RedisLike } from './redis-cache.js';
export type { ResolvedOptions } from './resolved-options.js';
export { backoffMs } from './retry-schedule.js';
export type { KeyState, StoredEvent } from './sql/inspect.js';
export { SpanAttributes } from './tracing.js';
