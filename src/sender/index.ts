export { backoffCeilingMs, fullJitterMs, parseRetryAfter } from './backoff.js';
export { BreakerState } from './breaker.js';
export { MemoryStore } from './memory-store.js';
export type { BreakerOptions, ResolvedSenderOptions, SenderOptions } from './options.js';
export { migrateOutbox, OutboxStore, outboxMigrations, outboxTables } from './outbox.js';
export type {
  AttemptReport,
  SenderEvent,
  SenderEvents,
  SenderStats,
  SendResult,
} from './sender.js';
export { createSender, InvalidEventError, Sender, SenderClosedError } from './sender.js';
export { decodeSecret, sign, signatureHeaders } from './signature.js';
export type { ClaimedEvent, DeadLetter, DeadReason, Enqueued, SenderStore, StoredEvent } from './store.js';
