/**
 * Where the sender keeps events until acknowledged (memory-store.ts, outbox.ts; one contract suite,
 * test/sender-store-contract.test.ts, runs against both): `claim` returns only a key's lowest
 * undelivered seq, never while another claim of the key is out nor behind a dead letter; a claim is
 * a lease (`leaseMs`); an explicit seq must be above the key's last.
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

/** A claimed event: the attempt it is on, what it has spent, and the lease token that completes it. */
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
  /** True when that earlier event is no longer in line (delivered, skipped or dead-lettered). */
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

/**
 * Why an event was dead-lettered: a permanent 4xx (`rejected`), `maxAttempts` failures
 * (`max-attempts`), or still failing after `retryForMs` (`expired`).
 */
export type DeadReason = 'rejected' | 'max-attempts' | 'expired';

/** Which dead letters an operator action is about: a key's, or one event's (unordered ones too). */
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
  /** Puts dead letters back in line (attempts and retry budget reset). Returns how many. */
  retry(target: DeadTarget): Promise<number>;
  /** Gives up on dead letters so the key's later events flow. Returns how many. */
  skip(target: DeadTarget): Promise<number>;
  deadLetters(key?: string): Promise<DeadLetter[]>;
  /** Events that will still be delivered without an operator (not behind a dead letter). */
  outstanding(): Promise<number>;
  /** Milliseconds until the earliest scheduled retry or lease expiry, when the store knows it cheaply. */
  nextDueInMs(): number | undefined;
  /** Forgets events delivered or skipped more than `retentionMs` ago. Returns how many. */
  prune(retentionMs: number): Promise<number>;
  close(): Promise<void>;
}
