/**
 * The sender: the other half of the protocol. Per key, one delivery in flight (seq n + 1 is
 * not sent until seq n is acknowledged); keys in parallel up to `concurrency`; retries with
 * capped exponential backoff and full jitter, `Retry-After` honoured; a dead letter keeps its
 * key blocked until an operator retries or skips it; a circuit breaker per endpoint.
 *
 * The dispatcher is one loop: claim up to the free room from the store (heads of keys only),
 * start a delivery for each, and sleep until something changes (a delivery settles, an event
 * is enqueued, a retry falls due, the breaker's cool-down ends, or the outbox poll interval).
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Kysely } from 'kysely';
import { isKysely } from '../database.js';
import { InboxError } from '../errors.js';
import { fullJitterMs, parseRetryAfter } from './backoff.js';
import { Breaker, BreakerState } from './breaker.js';
import { MemoryStore } from './memory-store.js';
import { type ResolvedSenderOptions, resolveSenderOptions, type SenderOptions } from './options.js';
import { enqueueOutbox, OutboxStore } from './outbox.js';
import { signatureHeaders } from './signature.js';
import type { ClaimedEvent, DeadLetter, DeadReason, Enqueued, NewEvent, SenderStore } from './store.js';

/** One event to send. Give `body` (sent as JSON) or `rawBody` (sent as is). */
export interface SenderEvent {
  /** The idempotency key, stable across retries. @defaultValue a random UUID */
  id?: string;
  /** Ordering key: events of one key are delivered one at a time, in seq order. */
  key?: string;
  /** Place in the key's sequence. @defaultValue the key's next (1, 2, 3, …) */
  seq?: number;
  /** A JSON value, serialised once: every retry sends the same bytes. */
  body?: unknown;
  /** Bytes (or a string) sent exactly as given. */
  rawBody?: string | Uint8Array;
  /** @defaultValue 'application/json' */
  contentType?: string;
  /** Extra request headers (not the protocol's own). */
  headers?: Record<string, string>;
}

/** How `send` ended. */
export interface SendResult {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  /** `already-enqueued`: an event with this id was enqueued before; it is delivered once. */
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

/** An event given to `send`/`enqueue` that cannot be sent as it is. */
export class InvalidEventError extends InboxError {
  override name = 'InvalidEventError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`webhook-inbox/sender: event.${field} ${message}`, 'invalid-event', 400);
  }
}

const ID = /^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$/;
const RETRYABLE = new Set([408, 409, 425, 429]);

interface Attempt {
  kind: 'ack' | 'retry' | 'permanent';
  status: number | null;
  error: string | null;
  retryAfterMs: number | undefined;
  replayed: boolean;
}

interface Waiter {
  resolve(result: SendResult): void;
  reject(err: Error): void;
}

export class Sender extends EventEmitter<SenderEvents> {
  readonly options: ResolvedSenderOptions;
  readonly #breaker: Breaker | undefined;
  readonly #stats = { enqueued: 0, attempts: 0, delivered: 0, retried: 0, deadLettered: 0 };
  readonly #waiters = new Map<string, Waiter[]>();
  readonly #inFlight = new Set<Promise<void>>();
  readonly #timers = new Set<NodeJS.Timeout>();
  readonly #protocolHeaders: Set<string>;
  #store: Promise<SenderStore> | undefined;
  #loop: Promise<void> | undefined;
  #dirty = false;
  #wakeUp: (() => void) | undefined;
  #settled: Array<() => void> = [];
  #closing = false;

  constructor(options: SenderOptions) {
    super();
    this.options = resolveSenderOptions(options);
    const b = this.options.breaker;
    if (b) {
      this.#breaker = new Breaker(b.failureThreshold, b.cooldownMs, (state) => {
        this.emit('breaker', state);
        this.#wake();
      });
    }
    const h = this.options.headers;
    this.#protocolHeaders = new Set([
      h.id,
      h.key,
      h.seq,
      'content-type',
      'content-length',
      'webhook-id',
      'webhook-timestamp',
      'webhook-signature',
    ]);
    if (this.options.dispatch) this.#loop = this.#run();
  }

  /** Opens the store (and runs the outbox migrations). Idempotent; retried after a failure. */
  ready(): Promise<SenderStore> {
    if (!this.#store) {
      const o = this.options;
      this.#store =
        o.db === undefined
          ? Promise.resolve(new MemoryStore())
          : OutboxStore.open(o.db, { schema: o.schema, migrate: o.migrate, poolSize: o.poolSize });
      this.#store.catch(() => {
        this.#store = undefined;
      });
    }
    return this.#store;
  }

  /** The outbox's Kysely instance (outbox only): run your producer transactions on it, or on your own. */
  async kysely(): Promise<Kysely<any>> {
    const store = await this.ready();
    if (!(store instanceof OutboxStore))
      throw new Error('webhook-inbox/sender: kysely() needs the outbox (`db`)');
    return store.kysely;
  }

  /**
   * Stores an event for delivery and returns its id, key and seq. With the outbox, pass the
   * producer's Kysely transaction first to enqueue in it: the event is delivered only if that
   * transaction commits.
   *
   * ```ts
   * await db.transaction().execute(async (tx) => {
   *   await tx.insertInto('orders').values(order).execute();
   *   await sender.enqueue(tx, { key: order.accountId, body: { type: 'order.created', order } });
   * });
   * ```
   */
  enqueue(event: SenderEvent): Promise<Enqueued>;
  enqueue(tx: Kysely<any>, event: SenderEvent): Promise<Enqueued>;
  async enqueue(a: SenderEvent | Kysely<any>, b?: SenderEvent): Promise<Enqueued> {
    if (this.#closing) throw new SenderClosedError();
    if (isKysely(a)) {
      const event = this.#prepare(b);
      if (this.options.db === undefined) {
        throw new Error('webhook-inbox/sender: enqueue(tx, event) needs the Postgres outbox (option `db`)');
      }
      const store = (await this.ready()) as OutboxStore;
      const enqueued = await enqueueOutbox(a, store.enqueueText, event);
      if (enqueued.created) this.#stats.enqueued++;
      // Not woken here: the producer's transaction has not committed yet. The poll finds it.
      return enqueued;
    }
    const event = this.#prepare(a);
    const store = await this.ready();
    const enqueued = await store.add(event);
    if (enqueued.created) this.#stats.enqueued++;
    this.#wake();
    return enqueued;
  }

  /**
   * Enqueues an event and resolves when it is acknowledged (`delivered`) or dead-lettered.
   * (With several dispatchers on one outbox, only the one that delivers it resolves `send`;
   * use `enqueue` there.)
   */
  async send(event: SenderEvent): Promise<SendResult> {
    if (!this.options.dispatch) {
      throw new Error(
        'webhook-inbox/sender: send() needs a dispatching sender; use enqueue() with `dispatch: false`',
      );
    }
    const prepared = this.#prepare(event);
    const done = new Promise<SendResult>((resolve, reject) => {
      const list = this.#waiters.get(prepared.id) ?? [];
      list.push({ resolve, reject });
      this.#waiters.set(prepared.id, list);
    });
    let enqueued: Enqueued;
    try {
      if (this.#closing) throw new SenderClosedError();
      const store = await this.ready();
      enqueued = await store.add(prepared);
    } catch (err) {
      this.#settle(prepared.id, undefined, err as Error);
      throw err;
    }
    if (!enqueued.created) {
      this.#settle(prepared.id, {
        id: enqueued.id,
        key: enqueued.key,
        seq: enqueued.seq,
        status: 'already-enqueued',
        attempts: 0,
        responseStatus: null,
      });
    } else {
      this.#stats.enqueued++;
      this.#wake();
    }
    return done;
  }

  /** Puts the key's dead-lettered events back in line, attempts reset. Returns how many. */
  async retry(key: string): Promise<number> {
    const n = await (await this.ready()).retry(key);
    this.#wake();
    return n;
  }

  /**
   * Gives up on the key's dead-lettered events so its later events flow. The consumer will see
   * a gap in the key's seqs (its inbox holds the later events until its gap timeout).
   */
  async skip(key: string): Promise<number> {
    const n = await (await this.ready()).skip(key);
    this.#wake();
    return n;
  }

  /** Dead-lettered events (of one key, or all), with their bodies and last error. */
  async deadLetters(key?: string): Promise<DeadLetter[]> {
    return (await this.ready()).deadLetters(key);
  }

  /** Counters and the breaker's state. */
  stats(): SenderStats {
    return {
      ...this.#stats,
      inFlight: this.#inFlight.size,
      breaker: this.#breaker?.state ?? BreakerState.closed,
    };
  }

  /**
   * Resolves when nothing is in flight and nothing is left that will be delivered without an
   * operator (events behind a dead letter wait for `retry` or `skip`).
   */
  async idle(): Promise<void> {
    for (;;) {
      if (this.#inFlight.size === 0 && (await (await this.ready()).outstanding()) === 0) return;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 100);
        this.#settled.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /**
   * Stops claiming, waits for the deliveries in flight (each ends within `timeoutMs`), and
   * closes the outbox if the sender opened it. `send` promises still waiting are rejected;
   * their events stay in the outbox (with `db`) for the next sender.
   */
  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    this.#wake();
    await this.#loop;
    await Promise.allSettled([...this.#inFlight]);
    for (const timer of this.#timers) clearTimeout(timer);
    for (const id of [...this.#waiters.keys()]) this.#settle(id, undefined, new SenderClosedError());
    const store = await this.#store?.catch(() => undefined);
    await store?.close();
  }

  // ---- events in --------------------------------------------------------------------------

  #prepare(event: SenderEvent | undefined): NewEvent {
    if (!event || typeof event !== 'object') throw new InvalidEventError('', 'must be an object');
    const id = event.id ?? randomUUID();
    if (typeof id !== 'string' || !ID.test(id)) {
      throw new InvalidEventError('id', 'must be 1-255 printable ASCII characters, no surrounding spaces');
    }
    const key = event.key ?? null;
    if (key !== null && (typeof key !== 'string' || !ID.test(key))) {
      throw new InvalidEventError('key', 'must be 1-255 printable ASCII characters, no surrounding spaces');
    }
    const seq = event.seq ?? null;
    if (seq !== null) {
      if (key === null) throw new InvalidEventError('seq', 'needs a `key`');
      if (!Number.isSafeInteger(seq) || seq < 1)
        throw new InvalidEventError('seq', 'must be a positive integer');
    }
    if (event.body !== undefined && event.rawBody !== undefined) {
      throw new InvalidEventError('body', 'and `rawBody` are exclusive; give one');
    }
    let body: Uint8Array;
    if (event.rawBody !== undefined) {
      if (typeof event.rawBody === 'string') body = Buffer.from(event.rawBody);
      else if (event.rawBody instanceof Uint8Array) body = event.rawBody;
      else throw new InvalidEventError('rawBody', 'must be a string or a Uint8Array');
    } else {
      const json = JSON.stringify(event.body ?? null);
      if (json === undefined) throw new InvalidEventError('body', 'must be JSON-serialisable');
      body = Buffer.from(json);
    }
    const contentType = event.contentType ?? 'application/json';
    if (typeof contentType !== 'string' || !/^[\x21-\x7e][\x20-\x7e]*$/.test(contentType)) {
      throw new InvalidEventError('contentType', 'must be a media type');
    }
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(event.headers ?? {})) {
      const lower = name.toLowerCase();
      if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(lower))
        throw new InvalidEventError('headers', `has a bad name ${JSON.stringify(name)}`);
      if (this.#protocolHeaders.has(lower)) {
        throw new InvalidEventError('headers', `must not set ${lower}: the sender sets it`);
      }
      if (typeof value !== 'string' || /[\r\n\0]/.test(value)) {
        throw new InvalidEventError('headers', `${lower} must be a string without line breaks`);
      }
      headers[lower] = value;
    }
    return { id, key, seq, body, contentType, headers };
  }

  // ---- the dispatcher ---------------------------------------------------------------------

  #wake(): void {
    this.#dirty = true;
    const wake = this.#wakeUp;
    this.#wakeUp = undefined;
    wake?.();
  }

  #warn(err: unknown): void {
    const error = err instanceof Error ? err : new Error(String(err));
    if (this.listenerCount('warning') > 0) this.emit('warning', error);
  }

  async #run(): Promise<void> {
    const o = this.options;
    while (!this.#closing) {
      this.#dirty = false;
      let store: SenderStore;
      try {
        store = await this.ready();
      } catch (err) {
        this.#warn(err);
        await this.#sleep(o.pollIntervalMs);
        continue;
      }
      const free = o.concurrency - this.#inFlight.size;
      const room = this.#breaker ? this.#breaker.room(free) : free;
      if (room > 0) {
        let claimed: ClaimedEvent[] = [];
        try {
          claimed = await store.claim(room, o.leaseMs);
        } catch (err) {
          this.#warn(err);
        }
        if (this.#closing) {
          // Claimed as we closed: leave them leased; memory dies with us, the outbox lease expires.
          break;
        }
        for (const event of claimed) this.#start(store, event);
        if (claimed.length === room) continue;
      }
      let wait = store.kind === 'postgres' ? o.pollIntervalMs : undefined;
      const due = store.nextDueInMs();
      if (due !== undefined) wait = Math.min(wait ?? due, due);
      const probe = this.#breaker?.msUntilProbe();
      if (probe !== undefined) wait = Math.min(wait ?? probe, probe);
      await this.#sleep(wait);
    }
  }

  /** Sleeps until woken, or `ms` (undefined: until woken). Returns at once if woken meanwhile. */
  #sleep(ms: number | undefined): Promise<void> {
    if (this.#dirty || this.#closing) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = ms === undefined ? undefined : setTimeout(() => this.#wake(), ms);
      this.#wakeUp = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  #start(store: SenderStore, event: ClaimedEvent): void {
    this.#breaker?.started();
    const delivery = this.#deliver(store, event)
      .catch((err) => this.#warn(err))
      .finally(() => {
        this.#inFlight.delete(delivery);
        this.#wake();
        const settled = this.#settled;
        this.#settled = [];
        for (const notify of settled) notify();
      });
    this.#inFlight.add(delivery);
  }

  async #deliver(store: SenderStore, event: ClaimedEvent): Promise<void> {
    const o = this.options;
    const a = await this.#attempt(event);
    this.#stats.attempts++;
    const base = {
      id: event.id,
      key: event.key,
      seq: event.seq,
      attempt: event.attempt,
      status: a.status,
      error: a.error,
      replayed: a.replayed,
    };
    if (a.kind === 'ack') {
      this.#breaker?.success();
      await store.delivered(event, a.status!);
      this.#stats.delivered++;
      const report: AttemptReport = { ...base, outcome: 'ack' };
      this.emit('attempt', report);
      this.emit('delivered', report);
      this.#settle(event.id, { ...this.#result(event, a), status: 'delivered' });
      return;
    }
    // A 4xx other than 408/409/425/429 is about the event, not the endpoint: the breaker
    // hears that the endpoint is alive.
    if (a.kind === 'permanent') this.#breaker?.success();
    else this.#breaker?.failure();
    if (a.kind === 'permanent' || event.attempt >= o.maxAttempts) {
      const reason: DeadReason = a.kind === 'permanent' ? 'rejected' : 'max-attempts';
      await store.deadLetter(event, reason, a.error ?? `HTTP ${a.status}`);
      this.#stats.deadLettered++;
      const report = { ...base, outcome: 'dead' as const, reason };
      this.emit('attempt', report);
      this.emit('dead-lettered', report);
      this.#settle(event.id, { ...this.#result(event, a), status: 'dead-lettered', reason });
      return;
    }
    const retryAfter = a.retryAfterMs !== undefined;
    const delayMs = retryAfter
      ? Math.min(a.retryAfterMs!, o.maxRetryAfterMs)
      : fullJitterMs(event.attempt, o.baseMs, o.capMs, o.random);
    await store.retryLater(event, delayMs, a.error ?? `HTTP ${a.status}`);
    this.#stats.retried++;
    const report: AttemptReport = { ...base, outcome: 'retry', delayMs, retryAfter };
    this.emit('attempt', report);
    this.emit('retry', report);
    if (!this.#closing) {
      const timer = setTimeout(() => {
        this.#timers.delete(timer);
        this.#wake();
      }, delayMs);
      this.#timers.add(timer);
    }
  }

  #result(event: ClaimedEvent, a: Attempt) {
    return {
      id: event.id,
      key: event.key,
      seq: event.seq,
      attempts: event.attempt,
      responseStatus: a.status,
      ...(a.error ? { error: a.error } : {}),
    };
  }

  async #attempt(event: ClaimedEvent): Promise<Attempt> {
    const o = this.options;
    const headers: Record<string, string> = {
      ...event.headers,
      'content-type': event.contentType,
      [o.headers.id]: event.id,
    };
    if (event.key !== null) {
      headers[o.headers.key] = event.key;
      headers[o.headers.seq] = String(event.seq);
    }
    if (o.secretKey) {
      Object.assign(
        headers,
        signatureHeaders(o.secretKey, event.id, Math.floor(Date.now() / 1000), event.body),
      );
    }
    const signal = AbortSignal.timeout(o.timeoutMs);
    try {
      // The global fetch (undici) keeps connections alive between attempts by default.
      const response = await fetch(o.endpoint, {
        method: 'POST',
        headers,
        body: event.body,
        signal,
        redirect: 'manual',
      });
      // Read the body to its end, so the connection goes back to the pool for the next attempt.
      const text = await response.text();
      const status = response.status;
      const kind =
        status >= 200 && status < 300
          ? 'ack'
          : RETRYABLE.has(status) || status >= 500
            ? 'retry'
            : 'permanent';
      return {
        kind,
        status,
        error: kind === 'ack' ? null : `HTTP ${status}: ${text.slice(0, 200)}`,
        retryAfterMs:
          kind === 'retry' ? parseRetryAfter(response.headers.get('retry-after'), Date.now()) : undefined,
        replayed: response.headers.get('idempotent-replayed') === 'true',
      };
    } catch (err) {
      const e = err as Error & { cause?: { code?: string; message?: string } };
      const error =
        e.name === 'TimeoutError'
          ? `timeout after ${o.timeoutMs} ms`
          : `network error: ${e.cause?.code ?? e.cause?.message ?? e.message}`;
      return { kind: 'retry', status: null, error, retryAfterMs: undefined, replayed: false };
    }
  }

  #settle(id: string, result: SendResult | undefined, err?: Error): void {
    const list = this.#waiters.get(id);
    if (!list) return;
    this.#waiters.delete(id);
    for (const w of list) {
      if (result) w.resolve(result);
      else w.reject(err!);
    }
  }
}

/**
 * Creates a sender and starts its dispatcher.
 *
 * ```ts
 * import { createSender } from 'webhook-inbox/sender';
 *
 * const sender = createSender({ endpoint: 'https://example.com/webhooks', secret: process.env.WEBHOOK_SECRET });
 * const result = await sender.send({ key: 'account-42', body: { type: 'deposit', amount: 100 } });
 * // result.status: 'delivered' (acknowledged with a 2xx) or 'dead-lettered'
 * await sender.close();
 * ```
 */
export function createSender(options: SenderOptions): Sender {
  return new Sender(options);
}
