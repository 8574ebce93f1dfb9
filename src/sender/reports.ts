/** What the sender tells its caller: results of `send`, attempt reports, counters, events. */
import { InboxError } from '../errors.js';
import type { BreakerState } from './breaker.js';
import type { DeadReason } from './store.js';

/** How `send` ended. */
export interface SendResult {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  /**
   * `already-enqueued`: an event with this id was enqueued before and is no longer in line
   * (delivered, skipped or dead-lettered) when this call came; nothing new is sent. A second
   * `send` of an id that is still in line waits for that event's outcome instead.
   */
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
  /** Retries: the wait came from the consumer's `Retry-After` (plus jitter). */
  readonly retryAfter?: boolean;
  /** Retries: the attempt counted toward `maxAttempts` (false for "later" answers and breaker probes). */
  readonly counted?: boolean;
  /** The attempt was the half-open breaker's probe. */
  readonly probe: boolean;
  /** The response said it was a replay of an already processed event (`Idempotent-Replayed: true`). */
  readonly replayed: boolean;
}

export interface SenderStats {
  /** Events accepted by `send`/`enqueue` in this process. */
  enqueued: number;
  /** HTTP attempts made. */
  attempts: number;
  delivered: number;
  retried: number;
  deadLettered: number;
  /** Delivered events forgotten after the retention window. */
  pruned: number;
  /**
   * Times the dispatcher asked its store for work: a claim (a query on the outbox), or when the
   * next event is due (the memory store). It grows with enqueues, settled deliveries and due
   * retries, not with idle time: one that climbs while nothing can be sent is a dispatcher
   * spinning.
   */
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
