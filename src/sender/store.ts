/**
 * Where the sender keeps events until they are acknowledged: the seam between the dispatcher
 * and persistence. `memory-store.ts` keeps them in the process; `outbox.ts` in a Postgres
 * table that survives a restart. Both give the same guarantee the dispatcher relies on:
 * `claim` only returns the lowest undelivered seq of a key, and never while another claim of
 * that key is out (head-of-line), nor while an earlier seq of the key is dead-lettered.
 */

/** An event as stored, ready to go on the wire. */
export interface StoredEvent {
  readonly id: string;
  /** Ordering key, or null for an unordered event. */
  readonly key: string | null;
  readonly seq: number | null;
  readonly body: Uint8Array;
  readonly contentType: string;
  /** Extra request headers given with the event. */
  readonly headers: Readonly<Record<string, string>>;
}

/** A claimed event: the attempt it is on, and the lease token that completes it. */
export interface ClaimedEvent extends StoredEvent {
  /** 1 on the first attempt. */
  readonly attempt: number;
  readonly token: string;
}

/** What `enqueue` stored (or found: an id enqueued twice is stored once). */
export interface Enqueued {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  /** False when an event with this id was already in the store. */
  readonly created: boolean;
}

/** An event given to `add`: seq null means "assign the key's next". */
export interface NewEvent {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly body: Uint8Array;
  readonly contentType: string;
  readonly headers: Readonly<Record<string, string>>;
}

/** A dead-lettered event, for the operator. */
export interface DeadLetter extends StoredEvent {
  readonly attempts: number;
  readonly reason: DeadReason;
  readonly lastError: string | null;
}

/** Why an event was dead-lettered: a permanent 4xx, or `maxAttempts` used up. */
export type DeadReason = 'rejected' | 'max-attempts';

export interface SenderStore {
  readonly kind: 'memory' | 'postgres';
  add(event: NewEvent): Promise<Enqueued>;
  /** Up to `limit` events that may be delivered now (heads of their keys, due, not leased). */
  claim(limit: number, leaseMs: number): Promise<ClaimedEvent[]>;
  delivered(event: ClaimedEvent, status: number): Promise<void>;
  retryLater(event: ClaimedEvent, delayMs: number, error: string): Promise<void>;
  deadLetter(event: ClaimedEvent, reason: DeadReason, error: string): Promise<void>;
  /** Puts the key's dead-lettered events back in line (attempts reset). Returns how many. */
  retry(key: string): Promise<number>;
  /** Gives up on the key's dead-lettered events so later ones flow. Returns how many. */
  skip(key: string): Promise<number>;
  deadLetters(key?: string): Promise<DeadLetter[]>;
  /** Events that will still be delivered without an operator (not behind a dead letter). */
  outstanding(): Promise<number>;
  /** Milliseconds until the earliest scheduled retry, when the store knows it cheaply. */
  nextDueInMs(): number | undefined;
  close(): Promise<void>;
}
