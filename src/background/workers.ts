/**
 * Workers: apply runnable events in the background (deferred mode, or `workers` set); the events
 * table is the queue. An ordered key's next event is taken by `take_turn` and the cursor moved by
 * `advance` after the handler, so the key is not locked during it (src/db/sql/take-turn.ts);
 * unordered ones by `take_pending` (SKIP LOCKED, so instances share the work without waiting). Each
 * runs in the transaction that took it, so it is applied exactly once. Lanes are woken in-process
 * after a commit, by other instances' NOTIFY (src/background/wake-ups.ts), and by a poll.
 */
import { firstTime, recovered } from '../observability/logger.js';
import type { Runtime } from '../runtime/runtime.js';
import { Listener } from './listener.js';
import { applyDuePending, applyTurn, type Drained } from './turns.js';

/** Keys remembered for a wake-up; past it, hints are dropped and the sweeper finds the keys. */
const MAX_KEY_HINTS = 10_000;
/** How often the pending count behind `maxPending` is read again. */
const PENDING_REFRESH_MS = 500;
/**
 * How long one batch's handlers run before it commits: fast handlers still share one COMMIT, a slow
 * one commits alone, so its row locks are not held through the next handlers' runs.
 */
export const BATCH_BUDGET_MS = 200;

export class Workers {
  readonly #rt: Runtime;
  readonly #lanes: Promise<void>[] = [];
  /** Lanes asleep, each waiting for a wake-up. */
  readonly #sleepers: Array<() => void> = [];
  /** Ordered keys that may have a runnable event, and those a lane is draining now. */
  readonly #keys = new Set<string>();
  readonly #active = new Set<string>();
  /** There may be a due unordered pending event; the generation tells a stale "no" from a fresh hint. */
  #unordered = true;
  #unorderedGeneration = 0;
  #busy = 0;
  /** Recent time per event of the unordered takes (ms, a moving average): sizes the batches. */
  #perEventMs = 0;
  #closing = false;
  #stateWaiters: Array<() => void> = [];
  #pollTimer: NodeJS.Timeout | undefined;
  /** A held or rated group has room again then (option `groups`). */
  #groupTimer: { at: number; timer: NodeJS.Timeout } | undefined;
  #refreshTimer: NodeJS.Timeout | undefined;
  #listener: Listener | undefined;

  constructor(rt: Runtime) {
    this.#rt = rt;
  }

  start(): void {
    const o = this.#rt.options;
    if (o.mode === 'deferred') {
      this.#refreshPending();
      this.#refreshTimer = setInterval(() => this.#refreshPending(), PENDING_REFRESH_MS);
      this.#refreshTimer.unref();
    }
    // workers: 0 is an instance that only acknowledges (others apply): nothing more to start.
    if (o.workers === 0) return;
    for (let i = 0; i < o.workers; i++) this.#lanes.push(this.#lane());
    this.#pollTimer = setInterval(() => this.wake(null), o.pollIntervalMs);
    this.#pollTimer.unref();
    if (this.#rt.database.kind === 'pg' && this.#rt.database.pool) {
      this.#listener = new Listener(this.#rt, (key) => this.wake(key));
      void this.#listener.start();
    }
  }

  /** A runnable event of `key` (or an unordered one, for null) may be waiting: wake a lane. */
  wake(key: string | null): void {
    if (this.#closing || this.#lanes.length === 0) return;
    if (key === null) {
      this.#unordered = true;
      this.#unorderedGeneration++;
    } else if (this.#keys.size < MAX_KEY_HINTS) {
      this.#keys.add(key);
    }
    this.#signal();
  }

  /** Resolves when every lane is asleep with nothing known to do. */
  async idle(): Promise<void> {
    while (!this.#isIdle()) {
      await new Promise<void>((resolve) => this.#stateWaiters.push(resolve));
    }
  }

  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    clearInterval(this.#pollTimer);
    clearInterval(this.#refreshTimer);
    clearTimeout(this.#groupTimer?.timer);
    this.#keys.clear();
    this.#unordered = false;
    for (const wake of this.#sleepers.splice(0)) wake();
    await Promise.all(this.#lanes);
    await this.#listener?.close();
    this.#changed();
  }

  #isIdle(): boolean {
    return (
      this.#closing ||
      this.#lanes.length === 0 ||
      (this.#busy === 0 &&
        this.#sleepers.length === this.#lanes.length &&
        !this.#unordered &&
        this.#runnableKey() === undefined)
    );
  }

  #wakeAt(at: Date): void {
    const when = at.getTime();
    if (this.#groupTimer && this.#groupTimer.at <= when) return;
    clearTimeout(this.#groupTimer?.timer);
    const timer = setTimeout(
      () => {
        this.#groupTimer = undefined;
        this.wake(null);
      },
      Math.max(0, when - Date.now()),
    );
    timer.unref();
    this.#groupTimer = { at: when, timer };
  }

  #changed(): void {
    if (this.#stateWaiters.length === 0) return;
    for (const resolve of this.#stateWaiters.splice(0)) resolve();
  }

  #signal(): void {
    this.#sleepers.shift()?.();
  }

  #runnableKey(): string | undefined {
    for (const key of this.#keys) if (!this.#active.has(key)) return key;
    return undefined;
  }

  async #lane(): Promise<void> {
    while (!this.#closing) {
      const key = this.#runnableKey();
      if (key !== undefined) {
        this.#keys.delete(key);
        this.#active.add(key);
        // More hints than this lane can take: pass one on.
        if (this.#runnableKey() !== undefined || this.#unordered) this.#signal();
        this.#busy++;
        try {
          await this.drainKey(key);
        } catch (err) {
          this.#rt.options.logger.error({ err, key }, 'webhook-inbox: worker drain failed');
        } finally {
          this.#active.delete(key);
          this.#busy--;
          this.#changed();
        }
        continue;
      }
      if (this.#unordered) {
        const generation = this.#unorderedGeneration;
        let didWork = false;
        this.#busy++;
        try {
          const began = performance.now();
          const { taken, wakeAt } = await applyDuePending(this.#rt, this.#batchSize(), BATCH_BUDGET_MS);
          if (taken === 0 && wakeAt) this.#wakeAt(wakeAt);
          // A moving average from 0: one slow take alone does not stop the batching of fast
          // handlers, and the budget stops a batch of slow ones after their first anyway.
          if (taken > 0)
            this.#perEventMs = 0.8 * this.#perEventMs + 0.2 * ((performance.now() - began) / taken);
          didWork = taken > 0;
        } catch (err) {
          // The database is unreachable or the pool is exhausted: the poll will try again.
          const { logger } = this.#rt.options;
          (firstTime(logger, 'worker') ? logger.error : logger.debug)(
            { err },
            'webhook-inbox: worker failed',
          );
        } finally {
          this.#busy--;
        }
        if (didWork) {
          recovered(this.#rt.options.logger, 'worker');
          // There may be more: wake another lane, so a backlog spreads to all of them.
          this.#signal();
        } else if (generation === this.#unorderedGeneration) {
          this.#unordered = false;
        }
        this.#changed();
        continue;
      }
      await new Promise<void>((resolve) => {
        this.#sleepers.push(resolve);
        this.#changed();
      });
    }
  }

  /**
   * `workerBatchSize` while every other lane is busy (a backlog), one while a lane sleeps, so a small
   * burst spreads across lanes; and no more than the recent time per event fits in `BATCH_BUDGET_MS`.
   */
  #batchSize(): number {
    if (this.#sleepers.length > 0) return 1;
    const most = this.#rt.options.workerBatchSize;
    if (this.#perEventMs === 0) return most;
    return Math.max(1, Math.min(most, Math.floor(BATCH_BUDGET_MS / this.#perEventMs)));
  }

  /** Applies the key's runnable events in seq order, each in its own transaction, until none is. */
  async drainKey(key: string): Promise<Drained> {
    let applied = 0;
    let gapsSkipped = 0;
    let keysBlocked = 0;
    for (;;) {
      const step = await applyTurn(this.#rt, key);
      if (step.applied) applied++;
      if (step.gap === 'skipped') gapsSkipped++;
      if (step.gap === 'blocked') keysBlocked++;
      if (!step.more || this.#closing) return { applied, gapsSkipped, keysBlocked };
    }
  }

  #refreshPending(): void {
    const rt = this.#rt;
    rt.statements.countPending(rt.database.acks, rt.options.source).then(
      (n) => {
        rt.pendingEstimate = n;
      },
      (err) => rt.options.logger.debug({ err }, 'webhook-inbox: could not count pending events'),
    );
  }
}
