export {
  backoffCeilingMs,
  fullJitterMs,
  parseImfFixdate,
  parseRetryAfter,
  retryAfterDelayMs,
} from './backoff.js';
export { BreakerState } from './breaker.js';
export type { SenderEvent } from './event.js';
export { InvalidEventError } from './event.js';
export { MemoryStore } from './memory-store.js';
export type { BreakerOptions, ResolvedSenderOptions, SenderOptions } from './options.js';
export { OutboxStore } from './outbox.js';
export { migrateOutbox, outboxMigrations, outboxTables } from './outbox-schema.js';
export type { AttemptReport, SenderEvents, SenderStats, SendResult } from './reports.js';
export { SenderClosedError } from './reports.js';
export { createSender, Sender } from './sender.js';
export { decodeSecret, sign, signatureHeaders } from './signature.js';
export type {
  ClaimedEvent,
  DeadLetter,
  DeadReason,
  DeadTarget,
  Enqueued,
  SenderStore,
  StoredEvent,
} from './store.js';
