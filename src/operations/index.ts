/** Operator actions: one module per resource; `Operations` is the object that holds them all. */
export type { LockWaitOptions } from './context.js';
export type { DeadLetter, DeadLetterFilter, DeadLetterGroup } from './dead-letters.js';
export type { GroupSummary } from './groups.js';
export type { IgnoredEvent, IgnoredFilter, IgnoredReplayResult, IgnoredType } from './ignored.js';
export type { Gap, KeyDetail, KeySummary, SkipResult } from './keys.js';
export type { OpenOperationsOptions } from './operations.js';
export { Operations, openOperations } from './operations.js';
export type { ReplayOptions, ReplayResult, ReplaySelection } from './replay.js';
export type { PruneOptions, PruneResult, PurgeOptions, PurgeResult } from './retention.js';
export type { ScrubOptions, ScrubResult } from './scrub.js';
export type { BatchRef, PinnedSelection, Selection } from './selection.js';
export { parseInstant } from './selection.js';
export type { InboxStatus } from './status.js';
