export { backoffMs } from './apply/retry-schedule.js';
export type { SweepReport } from './background/sweeper.js';
export type { CitusOptions } from './db/citus.js';
export type { DatabaseInput } from './db/database.js';
export type { PGliteLike, PgClientLike, PgPoolLike } from './db/drivers/shapes.js';
export type {
  InboxDatabase,
  InboxEventsTable,
  InboxGapsTable,
  InboxKeysTable,
  Int8,
} from './db/inbox-tables.js';
export { migrations } from './db/migrations.js';
export type { KeyState, StoredEvent } from './db/sql/inspect.js';
export type { RedisInput, RedisLike } from './dedup/redis-cache.js';
export type {
  FieldDelivery,
  FieldFunction,
  FieldSource,
  Fields,
  ResolvedSource,
} from './delivery/field-source.js';
export { type ParseMode, SECRET_HEADERS } from './delivery/payload.js';
export type { Provider } from './delivery/providers.js';
export type { Delivery } from './delivery/request.js';
export type { RespondEvent, RespondHook, ResponseShape } from './delivery/respond-hook.js';
export type { Secrets, VerifiableDelivery, VerifiedDelivery, Verify } from './delivery/verify.js';
export {
  headerToken,
  hmacSignature,
  paddleSignature,
  slackSignature,
  standardWebhooks,
  stripeSignature,
} from './delivery/verify.js';
export {
  EmbeddedDatabaseUnavailableError,
  HandlerError,
  InboxError,
  InboxOptionsError,
  InboxStartError,
  InvalidDeliveryError,
  OperationError,
  RawBodyUnavailableError,
  RejectEvent,
  RetryLater,
  UnauthorizedDeliveryError,
} from './errors.js';
export type { InboxHealth } from './inbox/health.js';
export { createInbox, Inbox } from './inbox/inbox.js';
export type { InboxLogger, Logger } from './observability/logger.js';
export type { InboxStats, MetricsOptions, RegistryLike } from './observability/metrics.js';
export { METRIC_NAMES } from './observability/metrics.js';
export { SpanAttributes } from './observability/tracing.js';
export type {
  BatchRef,
  DeadLetter,
  DeadLetterFilter,
  DeadLetterGroup,
  Gap,
  GroupSummary,
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
export type {
  BodySchema,
  JsonSchema,
  StandardIssue,
  StandardResult,
  StandardSchemaV1,
} from './options/body-schema.js';
export type { DeadLetterCause, DeadLetterEvent, OnDeadLetter } from './options/dead-letter-hook.js';
export type { Handler, HandlerContext, InboxEvent } from './options/event.js';
export type { GroupsOption, PerGroup, Rate, ResolvedGroups } from './options/groups.js';
export type {
  EventMapOf,
  EventTypeMap,
  HandlerFor,
  HandlerPattern,
  Handlers,
  PatternTypes,
  WildcardOf,
} from './options/handlers.js';
export type { InboxOptions } from './options/options.js';
export type { Outcome } from './outcome.js';
export { OutcomeKind, responseText } from './outcome.js';
export type { ResolvedOptions } from './runtime/resolved-options.js';
