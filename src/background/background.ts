/** Everything an inbox does besides answering a delivery, started by `ready()`, stopped by `close()`. */
import type { Context } from '@opentelemetry/api';
import type { Kysely } from 'kysely';
import type { Runtime } from '../runtime/runtime.js';
import { drainInline } from './drain.js';
import { applyDuePendingEvents, PENDING_PER_SWEEP, Sweeper, type SweepReport } from './sweeper.js';
import type { Drained } from './turns.js';
import { WakeUps } from './wake-ups.js';
import { Workers } from './workers.js';

export class Background {
  readonly #rt: Runtime;
  readonly #sweeper: Sweeper;
  #workers: Workers | undefined;
  #wakeUps: WakeUps | undefined;
  #started = false;

  constructor(rt: Runtime) {
    this.#rt = rt;
    const nothing: Drained = { applied: 0, gapsSkipped: 0, keysBlocked: 0 };
    this.#sweeper = new Sweeper(rt, {
      // Deferred: the lanes take the timed passes' work (with `workers: 0`, other instances' lanes do).
      drain: async (key, handOff) => {
        if (handOff && this.sheddingPending) {
          this.#workers!.wake(key);
          return nothing;
        }
        return this.#drained(key, false);
      },
      applyPending: (limit, handOff) => {
        if (handOff && this.sheddingPending) {
          this.#workers!.wake(null);
          return Promise.resolve(0);
        }
        return applyDuePendingEvents(rt, limit);
      },
    });
  }

  start(): void {
    const rt = this.#rt;
    if (this.#started || rt.closing) return;
    this.#started = true;
    const o = rt.options;
    if (o.sweepIntervalMs > 0) this.#sweeper.start();
    if (o.mode === 'deferred' || o.workers > 0) {
      this.#workers = new Workers(rt);
      this.#workers.start();
    }
    // PGlite has no LISTEN between processes.
    if (o.mode === 'deferred' && rt.database.kind === 'pg') this.#wakeUps = new WakeUps(rt);
  }

  /** Deferred mode with workers: a delivery's bound on pending events applies. */
  get sheddingPending(): boolean {
    return this.#workers !== undefined && this.#rt.options.mode === 'deferred';
  }

  async drain(key: string, wait: boolean, parent?: Context): Promise<number> {
    return (await this.#drained(key, wait, parent)).applied;
  }

  async #drained(key: string, wait: boolean, parent?: Context): Promise<Drained> {
    if (this.sheddingPending) return this.#workers!.drainKey(key);
    return { applied: await drainInline(this.#rt, key, wait, parent), gapsSkipped: 0, keysBlocked: 0 };
  }

  /** Inline mode: drains on the connection of a delivery, right after its response. */
  drainOn(key: string, db: Kysely<any>, parent?: Context): Promise<number> {
    return drainInline(this.#rt, key, true, parent, db);
  }

  /** After the commit of a pending delivery, so the worker this wakes can see it. */
  pendingStored(key: string | null): void {
    if (!this.#workers) return;
    // A duplicate of a pending event counts again, erring towards shedding until the next refresh.
    this.#rt.pendingEstimate++;
    this.#workers.wake(key);
    this.#wakeUps?.stored(key);
  }

  /** A delivery was held behind a gap at `receivedAt`: the sweeper passes when it comes due. */
  heldStored(receivedAt: number): void {
    this.#sweeper.gapDueAt(receivedAt);
  }

  sweep(): Promise<SweepReport> {
    return this.#sweeper.sweep();
  }

  /** After a replay: due unordered pending events, at most `count` + a sweep's worth. */
  applyPending(count: number): Promise<number> {
    return applyDuePendingEvents(this.#rt, count + PENDING_PER_SWEEP);
  }

  async idle(): Promise<void> {
    const running = this.#rt.background;
    for (;;) {
      while (running.size > 0) await Promise.allSettled([...running]);
      await this.#workers?.idle();
      if (running.size === 0) return;
    }
  }

  async close(): Promise<void> {
    const sweeperStopped = this.#sweeper.stop(); // no new pass starts from here on
    await this.#wakeUps?.close();
    await this.#workers?.close();
    await sweeperStopped;
    await this.idle();
  }
}
