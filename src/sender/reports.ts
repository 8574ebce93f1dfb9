import { InboxError } from '../errors.js';
import type { BreakerState } from './breaker.js';
import type { DeadReason } from './store.js';

/** How `send` ended. */
export interface SendResult {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  /** `already-enqueued`: an event with this id was enqueued before and is no longer in line; nothing is sent. */
  readonly status: 'delivered' | 'dead-lettered' | 'already-enqueued';
  readonly attempts: number;
  /** The last HTTP status, or null when the last attempt got no response. */
  readonly responseStatus: number | null;
  readonly reason?: DeadReason;
  readonly error?: string;
}

/** One HTTP attempt and what the sender made of it. */
export interface AttemptReport {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly attempt: number;
  readonly outcome: 'ack' | 'retry' | 'dead';
  readonly status: number | null;
  readonly error: string | null;
  /** Retries: the wait before the next attempt. */
  readonly delayMs?: number;
  /** Retries: the wait came from the consumer's `Retry-After`. */
  readonly retryAfter?: boolean;
  /** Retries: the attempt counted toward `maxAttempts`. */
  readonly counted?: boolean;
  /** The half-open breaker's probe. */
  readonly probe: boolean;
  /** `Idempotent-Replayed: true`: the consumer had processed it already. */
  readonly replayed: boolean;
}

export interface SenderStats {
  /** Events accepted by `send`/`enqueue` in this process. */
  enqueued: number;
  attempts: number;
  delivered: number;
  retried: number;
  deadLettered: number;
  /** Delivered events forgotten after the retention window. */
  pruned: number;
  /** Times the dispatcher asked its store for work: one that climbs while nothing can be sent is spinning. */
  looks: number;
  inFlight: number;
  breaker: BreakerState;
}

export interface SenderEvents {
  attempt: [AttemptReport];
  delivered: [AttemptReport];
  retry: [AttemptReport];
  'dead-lettered': [AttemptReport & { reason: DeadReason }];
  breaker: [BreakerState];
  /** A store error (the outbox database unreachable, …). The dispatcher keeps going. */
  warning: [Error];
}

/** `send` on a sender that was closed before the event was delivered. */
export class SenderClosedError extends InboxError {
  override name = 'SenderClosedError';
  constructor() {
    super('webhook-inbox/sender: the sender was closed before the event was delivered', 'sender-closed', 500);
  }
}
