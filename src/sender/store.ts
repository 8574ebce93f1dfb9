/** The sender's store: `claim` returns a key's lowest undelivered seq, one lease per key at a time. */

/** An event as stored, ready to go on the wire. */
export interface StoredEvent {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly body: Uint8Array;
  readonly contentType: string;
  readonly headers: Readonly<Record<string, string>>;
}

/** A claimed event, with the lease token that completes it. */
export interface ClaimedEvent extends StoredEvent {
  /** HTTP attempts including this one (1 on the first). */
  readonly attempt: number;
  /** Earlier attempts that counted as failures (not "later" answers, not breaker probes). */
  readonly failures: number;
  /** When the first attempt started (epoch ms): the retry budget runs from here. */
  readonly firstAttemptAt: number;
  readonly token: string;
}

/** What `enqueue` stored (or found: an id enqueued twice is stored once). */
export interface Enqueued {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  /** False when an event with this id was already in the store. */
  readonly created: boolean;
  /** That earlier event is no longer in line (delivered, skipped or dead-lettered). */
  readonly settled: boolean;
}

/** An event given to `add`: seq null means "assign the key's next". */
export type NewEvent = StoredEvent;

/** A dead-lettered event, for the operator. */
export interface DeadLetter extends StoredEvent {
  readonly attempts: number;
  readonly reason: DeadReason;
  readonly lastError: string | null;
}

/** A permanent 4xx (`rejected`), `maxAttempts` failures, or still failing after `retryForMs` (`expired`). */
export type DeadReason = 'rejected' | 'max-attempts' | 'expired';

/** A key's dead letters, or one event's. */
export type DeadTarget = string | { readonly id: string };

export interface SenderStore {
  readonly kind: 'memory' | 'postgres';
  add(event: NewEvent): Promise<Enqueued>;
  /** Up to `limit` events that may be delivered now (heads of their keys, due, not leased). */
  claim(limit: number, leaseMs: number): Promise<ClaimedEvent[]>;
  delivered(event: ClaimedEvent, status: number): Promise<void>;
  /** Back in line after `delayMs`; `counted` adds one to the event's failures. */
  retryLater(event: ClaimedEvent, delayMs: number, error: string, counted: boolean): Promise<void>;
  deadLetter(event: ClaimedEvent, reason: DeadReason, error: string): Promise<void>;
  /** These return how many. */
  retry(target: DeadTarget): Promise<number>;
  skip(target: DeadTarget): Promise<number>;
  deadLetters(key?: string): Promise<DeadLetter[]>;
  /** Events that will still be delivered without an operator (not behind a dead letter). */
  outstanding(): Promise<number>;
  /** Ms until the earliest retry or lease expiry, when the store knows it cheaply. */
  nextDueInMs(): number | undefined;
  /** Forgets events delivered or skipped more than `retentionMs` ago; returns how many. */
  prune(retentionMs: number): Promise<number>;
  close(): Promise<void>;
}
