/** The sender's facade; the loop is in `dispatcher.ts`. */
import { EventEmitter } from 'node:events';
import type { Kysely } from 'kysely';
import { isKysely } from '../db/database.js';
import { Breaker, BreakerState } from './breaker.js';
import { Dispatcher } from './dispatcher.js';
import { prepareEvent, type SenderEvent } from './event.js';
import { MemoryStore } from './memory-store.js';
import { type ResolvedSenderOptions, resolveSenderOptions, type SenderOptions } from './options.js';
import { enqueueOutbox, OutboxStore } from './outbox.js';
import { SenderClosedError, type SenderEvents, type SenderStats, type SendResult } from './reports.js';
import { SendWaiters } from './send-waiters.js';
import type { DeadLetter, DeadTarget, Enqueued, SenderStore } from './store.js';

export class Sender extends EventEmitter<SenderEvents> {
  readonly options: ResolvedSenderOptions;
  readonly #breaker: Breaker | undefined;
  readonly #dispatcher: Dispatcher;
  readonly #waiters = new SendWaiters();
  readonly #protocolHeaders: Set<string>;
  #enqueued = 0;
  #store: Promise<SenderStore> | undefined;
  #closing = false;

  constructor(options: SenderOptions) {
    super();
    this.options = resolveSenderOptions(options);
    const b = this.options.breaker;
    if (b) {
      this.#breaker = new Breaker(b.failureThreshold, b.cooldownMs, (state) => {
        this.emit('breaker', state);
        this.#dispatcher.wake();
      });
    }
    const h = this.options.headers;
    const signed = ['webhook-id', 'webhook-timestamp', 'webhook-signature'];
    this.#protocolHeaders = new Set([h.id, h.key, h.seq, 'content-type', 'content-length', ...signed]);
    this.#dispatcher = new Dispatcher(this.options, () => this.ready(), this.#breaker, this, this.#waiters);
    if (this.options.dispatch) this.#dispatcher.start();
  }

  /** Opens the store (and runs the outbox migrations). Idempotent; retried after a failure. */
  ready(): Promise<SenderStore> {
    if (!this.#store) {
      const o = this.options;
      this.#store =
        o.db === undefined
          ? Promise.resolve(new MemoryStore({ rememberIds: o.rememberIds }))
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
   * Stores an event for delivery. With the outbox, pass the producer's Kysely transaction first: the
   * event is delivered only if it commits (`sender.enqueue(tx, { key, body })`).
   */
  enqueue(event: SenderEvent): Promise<Enqueued>;
  enqueue(tx: Kysely<any>, event: SenderEvent): Promise<Enqueued>;
  async enqueue(a: SenderEvent | Kysely<any>, b?: SenderEvent): Promise<Enqueued> {
    if (this.#closing) throw new SenderClosedError();
    if (isKysely(a)) {
      const event = prepareEvent(b, this.#protocolHeaders);
      if (this.options.db === undefined) {
        throw new Error('webhook-inbox/sender: enqueue(tx, event) needs the Postgres outbox (option `db`)');
      }
      const store = (await this.ready()) as OutboxStore;
      const enqueued = await enqueueOutbox(a, store.enqueueText, event);
      if (enqueued.created) this.#enqueued++;
      // Not woken: the producer's transaction has not committed yet; the poll finds it.
      return enqueued;
    }
    const event = prepareEvent(a, this.#protocolHeaders);
    const store = await this.ready();
    const enqueued = await store.add(event);
    if (enqueued.created) this.#enqueued++;
    this.#dispatcher.wake();
    return enqueued;
  }

  /** Enqueues an event and resolves when it is delivered or dead-lettered (one outcome per id). */
  async send(event: SenderEvent): Promise<SendResult> {
    if (!this.options.dispatch) {
      throw new Error(
        'webhook-inbox/sender: send() needs a dispatching sender; use enqueue() with `dispatch: false`',
      );
    }
    const prepared = prepareEvent(event, this.#protocolHeaders);
    const waiter = this.#waiters.add(prepared.id);
    let enqueued: Enqueued;
    try {
      if (this.#closing) throw new SenderClosedError();
      enqueued = await (await this.ready()).add(prepared);
    } catch (err) {
      waiter.reject(err as Error);
      return waiter.promise;
    }
    if (enqueued.created) this.#enqueued++;
    if (!enqueued.created && enqueued.settled) {
      waiter.resolve({
        id: enqueued.id,
        key: enqueued.key,
        seq: enqueued.seq,
        status: 'already-enqueued',
        attempts: 0,
        responseStatus: null,
      });
    }
    this.#dispatcher.wake();
    return waiter.promise;
  }

  /** Puts dead letters back in line, budget reset: a key's (`retry('acct-1')`) or one event's (`retry({ id })`). */
  async retry(target: DeadTarget): Promise<number> {
    const n = await (await this.ready()).retry(target);
    this.#dispatcher.wake();
    return n;
  }

  /** Gives up on dead letters so the key's later events flow; the consumer sees a gap in the key's seqs. */
  async skip(target: DeadTarget): Promise<number> {
    const n = await (await this.ready()).skip(target);
    this.#dispatcher.wake();
    return n;
  }

  /** Dead-lettered events (of one key, or all). */
  async deadLetters(key?: string): Promise<DeadLetter[]> {
    return (await this.ready()).deadLetters(key);
  }

  stats(): SenderStats {
    return {
      enqueued: this.#enqueued,
      ...this.#dispatcher.counters,
      inFlight: this.#dispatcher.inFlight.size,
      breaker: this.#breaker?.state ?? BreakerState.closed,
    };
  }

  /** Resolves when nothing is in flight and nothing is left to deliver without an operator. */
  async idle(): Promise<void> {
    for (;;) {
      if (this.#dispatcher.inFlight.size === 0 && (await (await this.ready()).outstanding()) === 0) return;
      await this.#dispatcher.nextSettle(100);
    }
  }

  /** Stops claiming, waits for deliveries in flight, closes its outbox; waiting `send`s reject. */
  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    await this.#dispatcher.stop();
    this.#waiters.rejectAll(new SenderClosedError());
    const store = await this.#store?.catch(() => undefined);
    await store?.close();
  }
}

/**
 * Creates a sender and starts its dispatcher.
 *
 * ```ts
 * const sender = createSender({ endpoint: 'https://example.com/webhooks', secret: process.env.SECRET });
 * const result = await sender.send({ key: 'account-42', body: { type: 'deposit', amount: 100 } });
 * ```
 */
export function createSender(options: SenderOptions): Sender {
  return new Sender(options);
}
