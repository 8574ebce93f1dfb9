/** One loop: claims up to the free room, starts a delivery each, and sleeps until something changes. */
import type { EventEmitter } from 'node:events';
import { type Attempt, attempt } from './attempt.js';
import type { Breaker } from './breaker.js';
import type { ResolvedSenderOptions } from './options.js';
import type { AttemptReport, SenderEvents, SenderStats, SendResult } from './reports.js';
import { decide } from './retry-policy.js';
import type { SendWaiters } from './send-waiters.js';
import type { ClaimedEvent, SenderStore } from './store.js';

const PRUNE_EVERY_MS = 60_000;

export type DispatcherCounters = Omit<SenderStats, 'enqueued' | 'inFlight' | 'breaker'>;

export class Dispatcher {
  readonly inFlight = new Set<Promise<void>>();
  readonly counters: DispatcherCounters = {
    attempts: 0,
    delivered: 0,
    retried: 0,
    deadLettered: 0,
    pruned: 0,
    looks: 0,
  };
  readonly #o: ResolvedSenderOptions;
  readonly #store: () => Promise<SenderStore>;
  readonly #breaker: Breaker | undefined;
  readonly #events: EventEmitter<SenderEvents>;
  readonly #waiters: SendWaiters;
  readonly #timers = new Set<NodeJS.Timeout>();
  #loop: Promise<void> | undefined;
  #dirty = false;
  #wakeUp: (() => void) | undefined;
  #settled: Array<() => void> = [];
  #closing = false;
  #nextPruneAt = 0;
  #pruning = false;

  constructor(
    options: ResolvedSenderOptions,
    store: () => Promise<SenderStore>,
    breaker: Breaker | undefined,
    events: EventEmitter<SenderEvents>,
    waiters: SendWaiters,
  ) {
    this.#o = options;
    this.#store = store;
    this.#breaker = breaker;
    this.#events = events;
    this.#waiters = waiters;
  }

  start(): void {
    this.#loop ??= this.#run();
  }

  wake(): void {
    this.#dirty = true;
    const wake = this.#wakeUp;
    this.#wakeUp = undefined;
    wake?.();
  }

  nextSettle(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.#settled.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  async stop(): Promise<void> {
    this.#closing = true;
    this.wake();
    await this.#loop;
    await Promise.allSettled([...this.inFlight]);
    for (const timer of this.#timers) clearTimeout(timer);
  }

  #warn(err: unknown): void {
    const error = err instanceof Error ? err : new Error(String(err));
    if (this.#events.listenerCount('warning') > 0) this.#events.emit('warning', error);
  }

  async #run(): Promise<void> {
    const o = this.#o;
    while (!this.#closing) {
      this.#dirty = false;
      let store: SenderStore;
      try {
        store = await this.#store();
      } catch (err) {
        this.#warn(err);
        await this.#sleep(o.pollIntervalMs);
        continue;
      }
      this.#maybePrune(store);
      const free = o.concurrency - this.inFlight.size;
      const room = this.#breaker ? this.#breaker.room(free) : free;
      if (room > 0) {
        let claimed: ClaimedEvent[] = [];
        try {
          this.counters.looks++;
          claimed = await store.claim(room, o.leaseMs);
        } catch (err) {
          this.#warn(err);
        }
        // Claimed as we closed: left leased; memory dies with us, the outbox lease expires.
        if (this.#closing) break;
        for (const event of claimed) this.#start(store, event);
        if (claimed.length === room) continue;
      }
      let wait = Math.max(0, this.#nextPruneAt - Date.now());
      const at = (ms: number | undefined) => {
        if (ms !== undefined) wait = Math.min(wait, ms);
      };
      if (room > 0) {
        if (store.kind !== 'postgres') this.counters.looks++;
        at(store.kind === 'postgres' ? o.pollIntervalMs : store.nextDueInMs());
      }
      at(this.#breaker?.msUntilProbe());
      await this.#sleep(wait);
    }
  }

  #maybePrune(store: SenderStore): void {
    const now = Date.now();
    if (this.#pruning || now < this.#nextPruneAt) return;
    // At most once a second, so that a retention of 0 does not make the loop spin.
    this.#nextPruneAt = now + Math.min(PRUNE_EVERY_MS, Math.max(1000, this.#o.retentionMs));
    this.#pruning = true;
    store
      .prune(this.#o.retentionMs)
      .then((n) => {
        this.counters.pruned += n;
      })
      .catch((err) => this.#warn(err))
      .finally(() => {
        this.#pruning = false;
      });
  }

  #sleep(ms: number): Promise<void> {
    if (this.#dirty || this.#closing) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => this.wake(), ms);
      this.#wakeUp = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  #start(store: SenderStore, event: ClaimedEvent): void {
    const probe = this.#breaker?.started() ?? false;
    const delivery = this.#deliver(store, event, probe)
      .catch((err) => this.#warn(err))
      .finally(() => {
        this.inFlight.delete(delivery);
        this.wake();
        const settled = this.#settled;
        this.#settled = [];
        for (const notify of settled) notify();
      });
    this.inFlight.add(delivery);
  }

  async #deliver(store: SenderStore, event: ClaimedEvent, probe: boolean): Promise<void> {
    const a = await attempt(this.#o, event);
    this.counters.attempts++;
    if (a.kind === 'ack' || a.kind === 'permanent') this.#breaker?.success();
    else if (a.kind === 'later') this.#breaker?.answered();
    else this.#breaker?.failure();
    const decision = decide(this.#o, event, a, probe, Date.now());
    const base = {
      id: event.id,
      key: event.key,
      seq: event.seq,
      attempt: event.attempt,
      status: a.status,
      error: a.error,
      probe,
      replayed: a.replayed,
    };
    if (decision.action === 'delivered') {
      await store.delivered(event, a.status!);
      this.counters.delivered++;
      const report: AttemptReport = { ...base, outcome: 'ack' };
      this.#events.emit('attempt', report);
      this.#events.emit('delivered', report);
      this.#waiters.settle(event.id, { ...result(event, a), status: 'delivered' });
      return;
    }
    if (decision.action === 'dead') {
      const { reason } = decision;
      await store.deadLetter(event, reason, a.error ?? `HTTP ${a.status}`);
      this.counters.deadLettered++;
      const report = { ...base, outcome: 'dead' as const, reason };
      this.#events.emit('attempt', report);
      this.#events.emit('dead-lettered', report);
      this.#waiters.settle(event.id, { ...result(event, a), status: 'dead-lettered', reason });
      return;
    }
    const { delayMs, counted, retryAfter } = decision;
    await store.retryLater(event, delayMs, a.error ?? `HTTP ${a.status}`, counted);
    this.counters.retried++;
    const report: AttemptReport = { ...base, outcome: 'retry', delayMs, retryAfter, counted };
    this.#events.emit('attempt', report);
    this.#events.emit('retry', report);
    // The outbox is polled: only a retry due before the next poll needs a wake-up of its own.
    if (store.kind === 'postgres' && delayMs < this.#o.pollIntervalMs && !this.#closing) {
      const timer = setTimeout(() => {
        this.#timers.delete(timer);
        this.wake();
      }, delayMs);
      this.#timers.add(timer);
    }
  }
}

function result(event: ClaimedEvent, a: Attempt): Omit<SendResult, 'status'> {
  return {
    id: event.id,
    key: event.key,
    seq: event.seq,
    attempts: event.attempt,
    responseStatus: a.status,
    ...(a.error ? { error: a.error } : {}),
  };
}
