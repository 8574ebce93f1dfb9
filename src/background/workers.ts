/** Workers apply runnable events from the events table, each in the transaction that took it. */
import { firstTime, recovered } from '../observability/logger.js';
import type { Runtime } from '../runtime/runtime.js';
import { LaneLimit } from './lane-limit.js';
import { Listener } from './listener.js';
import { applyDuePending, applyTurn, type Drained } from './turns.js';

/** Keys remembered for a wake-up; past it, hints are dropped and the sweeper finds the keys. */
const MAX_KEY_HINTS = 10_000;
const PENDING_REFRESH_MS = 500;
/** A batch commits after this much handler time, so a slow handler's locks are not held through others. */
export const BATCH_BUDGET_MS = 200;

export class Workers {
  readonly #rt: Runtime;
  readonly #lanes: Promise<void>[] = [];
  readonly #sleepers: Array<() => void> = [];
  readonly #keys = new Set<string>();
  readonly #active = new Set<string>();
  /** There may be a due unordered pending event; the generation tells a stale "no" from a fresh hint. */
  #unordered = true;
  #unorderedGeneration = 0;
  #busy = 0;
  /** Lanes taking unordered batches now, at most `#limit.lanes`. */
  #takingUnordered = 0;
  readonly #limit: LaneLimit;
  #perEventMs = 0;
  #closing = false;
  #stateWaiters: Array<() => void> = [];
  #pollTimer: NodeJS.Timeout | undefined;
  #groupTimer: { at: number; timer: NodeJS.Timeout } | undefined;
  #refreshTimer: NodeJS.Timeout | undefined;
  #listener: Listener | undefined;

  constructor(rt: Runtime) {
    this.#rt = rt;
    this.#limit = new LaneLimit(Math.max(1, rt.options.workers));
  }

  start(): void {
    const o = this.#rt.options;
    if (o.mode === 'deferred') {
      this.#refreshPending();
      this.#refreshTimer = setInterval(() => this.#refreshPending(), PENDING_REFRESH_MS);
      this.#refreshTimer.unref();
    }
    if (o.workers === 0) return;
    for (let i = 0; i < o.workers; i++) this.#lanes.push(this.#lane());
    this.#pollTimer = setInterval(() => this.wake(null), o.pollIntervalMs);
    this.#pollTimer.unref();
    if (this.#rt.database.kind === 'pg' && this.#rt.database.pool) {
      this.#listener = new Listener(this.#rt, (key) => this.wake(key));
      void this.#listener.start();
    }
  }

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
      if (this.#unordered && this.#takingUnordered < this.#limit.lanes) {
        const generation = this.#unorderedGeneration;
        let didWork = false;
        this.#busy++;
        this.#takingUnordered++;
        try {
          const began = performance.now();
          const { taken, wakeAt } = await applyDuePending(this.#rt, this.#batchSize(), BATCH_BUDGET_MS);
          if (taken === 0 && wakeAt) this.#wakeAt(wakeAt);
          const elapsed = performance.now() - began;
          // From 0: one slow take does not stop the batching of fast handlers (the budget stops slow ones).
          if (taken > 0) this.#perEventMs = 0.8 * this.#perEventMs + 0.2 * (elapsed / taken);
          this.#limit.observe(elapsed, taken);
          didWork = taken > 0;
        } catch (err) {
          const { logger } = this.#rt.options;
          (firstTime(logger, 'worker') ? logger.error : logger.debug)(
            { err },
            'webhook-inbox: worker failed',
          );
        } finally {
          this.#busy--;
          this.#takingUnordered--;
        }
        if (didWork) {
          recovered(this.#rt.options.logger, 'worker');
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

  /** One while a lane that may take sleeps (a burst spreads across lanes), else what fits in `BATCH_BUDGET_MS`. */
  #batchSize(): number {
    if (this.#sleepers.length > 0 && this.#takingUnordered < this.#limit.lanes) return 1;
    const most = this.#rt.options.workerBatchSize;
    if (this.#perEventMs === 0) return most;
    return Math.max(1, Math.min(most, Math.floor(BATCH_BUDGET_MS / this.#perEventMs)));
  }

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
