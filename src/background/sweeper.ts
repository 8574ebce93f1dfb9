// Every instance's periodic pass: drains, due retries, gap timeouts, due pending events, retention.

import { missingTables } from '../db/drivers/postgres-error.js';
import type { SweepStep } from '../db/sql/sweep.js';
import { firstTime, recovered } from '../observability/logger.js';
import { prune, purgeDead } from '../operations/retention.js';
import type { Runtime } from '../runtime/runtime.js';
import { applyDuePending, type Drained, gapSettled } from './turns.js';

/** While rows past retention are left, each pass prunes for PRUNE_PASS_MS; caught up, every PRUNE_EVERY_MS. */
const PRUNE_BATCH = 10_000;
const PRUNE_PASS_MS = 1000;
const PRUNE_EVERY_MS = 10_000;
/** Dead letters past `deadRetention`, per pass: they come one by one, never at an ingest rate. */
const PURGE_BATCH = 1000;
export const PENDING_PER_SWEEP = 100;
const KEYS_PER_SWEEP = 500;
const KEYS_EXAMINED_PER_SWEEP = 1000;
/** Inline mode: how many times one pass settles a key's next due gap after draining to it. */
const GAP_ROUNDS = 100;
const MAX_DEADLINES = 1000;

export interface SweepWork {
  /** `handOff`: the workers may take it instead (nothing done here). */
  drain(key: string, handOff: boolean): Promise<Drained>;
  applyPending(limit: number, handOff: boolean): Promise<number>;
}

/** What one sweeper pass did; gaps and keys count the drains it ran too. */
export interface SweepReport {
  drained: number;
  gapsSkipped: number;
  keysBlocked: number;
  applied: number;
  pruned: number;
  purged: number;
  keyErrors: number;
}

export class Sweeper {
  readonly #rt: Runtime;
  readonly #work: SweepWork;
  #timer: NodeJS.Timeout | undefined;
  #nextPassAt = 0;
  #running: Promise<unknown> | undefined;
  #started = false;
  #deadlines: number[] = [];
  #nextPruneAt = 0;
  #resumeAfter: string | undefined;

  constructor(rt: Runtime, work: SweepWork) {
    this.#rt = rt;
    this.#work = work;
  }

  start(): void {
    this.#started = true;
    this.#schedule(this.#rt.options.sweepIntervalMs);
  }

  /** Runs a pass when a held event's gap comes due, on a grid, so that many held events add few passes. */
  gapDueAt(receivedAt: number): void {
    const o = this.#rt.options;
    if (!this.#started || this.#rt.closing) return;
    const step = Math.max(50, Math.min(o.sweepIntervalMs, Math.floor(o.gapTimeoutMs / 10)));
    // A few milliseconds past the due time: the SQL compares with the database's clock.
    const at = Math.ceil((receivedAt + o.gapTimeoutMs) / step) * step + 5;
    const list = this.#deadlines;
    if (list.includes(at)) return;
    if (list.length >= MAX_DEADLINES) return;
    list.push(at);
    list.sort((a, b) => a - b);
    if (this.#timer && !this.#running && at < this.#nextPassAt) this.#schedule(at - Date.now());
  }

  #schedule(delay: number): void {
    clearTimeout(this.#timer);
    const wait = Math.max(0, delay);
    this.#nextPassAt = Date.now() + wait;
    this.#timer = setTimeout(() => this.#pass(), wait);
    this.#timer.unref();
  }

  #pass(): void {
    this.#timer = undefined;
    const { logger } = this.#rt.options;
    const startedAt = Date.now();
    // Said once per outage, with the fix when the tables are missing.
    this.#running = this.sweep({ handOff: true })
      .then(
        () => recovered(logger, 'sweeper'),
        (err) =>
          (firstTime(logger, 'sweeper') ? logger.error : logger.debug)(
            { err },
            `webhook-inbox: sweeper pass failed${missingTables(err) ? ": the inbox's tables are missing: run `webhook-inbox migrate`" : ''}`,
          ),
      )
      .finally(() => {
        this.#running = undefined;
        if (this.#rt.closing || !this.#started) return;
        this.#deadlines = this.#deadlines.filter((at) => at > startedAt);
        const interval = this.#rt.options.sweepIntervalMs;
        const next = this.#deadlines[0];
        this.#schedule(next === undefined ? interval : Math.min(interval, next - Date.now()));
      });
  }

  async stop(): Promise<void> {
    this.#started = false;
    clearTimeout(this.#timer);
    await this.#running;
  }

  /** One pass, now. `handOff`: drains may go to this instance's worker lanes; the report counts only its own. */
  async sweep(options: { handOff?: boolean } = {}): Promise<SweepReport> {
    const rt = this.#rt;
    const o = rt.options;
    const report: SweepReport = {
      drained: 0,
      gapsSkipped: 0,
      keysBlocked: 0,
      applied: 0,
      pruned: 0,
      purged: 0,
      keyErrors: 0,
    };
    rt.metrics.sweeperRun();
    const failed = new Set<string>();
    // Inline mode: each round walks from where the pass began, so a key with another due gap is seen again.
    const after = this.#resumeAfter;
    for (let round = 0; round < GAP_ROUNDS && !rt.closing; round++) {
      const skipped = report.gapsSkipped;
      this.#resumeAfter = await this.#settle(report, options.handOff === true, failed, after);
      if (o.mode !== 'inline' || report.gapsSkipped === skipped) break;
    }
    report.applied = await this.#work.applyPending(PENDING_PER_SWEEP, options.handOff === true);
    return this.#prune(report);
  }

  async #settle(
    report: SweepReport,
    handOff: boolean,
    failed: Set<string>,
    after: string | undefined,
  ): Promise<string | undefined> {
    const rt = this.#rt;
    const o = rt.options;
    let step: SweepStep;
    try {
      // READ COMMITTED (an older snapshot misses gaps filled since), on connections no handler holds.
      step = await rt.database.acks
        .transaction()
        .setIsolationLevel('read committed')
        .execute((tx) =>
          rt.statements.sweep(tx, o.source, o.gapTimeoutMs, o.onGapTimeout, {
            keys: KEYS_PER_SWEEP,
            scan: KEYS_EXAMINED_PER_SWEEP,
            after,
          }),
        );
    } catch (err) {
      rt.metrics.sweeperError();
      throw err;
    }
    const toDrain: string[] = [];
    for (const row of step.rows) {
      if (row.action === 'error') {
        if (failed.has(row.key)) continue;
        failed.add(row.key);
        report.keyErrors++;
        rt.metrics.sweeperError();
        o.logger.error(
          { key: row.key, error: row.error, source: o.source },
          'webhook-inbox: sweeper could not handle a key; the pass goes on',
        );
        continue;
      }
      if (row.action === 'blocked' || row.action === 'skipped') {
        gapSettled(rt, row.key, row.action === 'blocked', row.fromSeq, row.toSeq);
        if (row.action === 'blocked') {
          report.keysBlocked++;
          continue;
        }
        report.gapsSkipped++;
      }
      toDrain.push(row.key);
    }
    // A few keys at a time: each drain holds a connection while its handler runs.
    const lanes = Math.max(1, Math.min(4, Math.floor(o.poolSize / 2)));
    let next = 0;
    await Promise.all(
      Array.from({ length: Math.min(lanes, toDrain.length) }, async () => {
        while (next < toDrain.length && !rt.closing) {
          const key = toDrain[next++];
          try {
            const drained = await rt.track(this.#work.drain(key, handOff));
            report.drained += drained.applied;
            report.gapsSkipped += drained.gapsSkipped;
            report.keysBlocked += drained.keysBlocked;
          } catch (err) {
            report.keyErrors++;
            rt.metrics.sweeperError();
            o.logger.error({ err, key, source: o.source }, 'webhook-inbox: sweeper could not drain a key');
          }
        }
      }),
    );
    return step.resumeAfter;
  }

  async #prune(report: SweepReport): Promise<SweepReport> {
    const rt = this.#rt;
    const o = rt.options;
    if (
      (o.retention !== false || o.deadRetention !== false) &&
      Date.now() >= this.#nextPruneAt &&
      !rt.closing
    ) {
      const scope = {
        db: rt.database.kysely,
        tables: rt.tables,
        source: o.source,
        lockTimeoutMs: o.lockTimeoutMs,
      };
      let behind = false;
      if (o.retention !== false) {
        const pass = await prune(scope, {
          olderThan: o.retention,
          batchSize: PRUNE_BATCH,
          maxMs: PRUNE_PASS_MS,
        });
        const { pruned } = pass;
        report.pruned = pruned;
        behind = pass.behind;
        if (pruned > 0)
          o.logger.debug({ pruned, source: o.source }, 'webhook-inbox: pruned processed events');
      }
      if (o.deadRetention !== false) {
        const { purged } = await purgeDead(
          scope,
          { olderThan: o.deadRetention },
          { batchSize: PURGE_BATCH, maxBatches: 1 },
        );
        report.purged = purged;
        behind ||= purged >= PURGE_BATCH;
        if (purged > 0)
          o.logger.info({ purged, source: o.source }, 'webhook-inbox: purged dead letters (deadRetention)');
      }
      this.#nextPruneAt = behind ? 0 : Date.now() + PRUNE_EVERY_MS;
    }
    return report;
  }
}

/** Applies due unordered pending events, at most `limit`: one round trip when there are none. */
export async function applyDuePendingEvents(rt: Runtime, limit: number): Promise<number> {
  let applied = 0;
  for (let taken = 0; taken < limit && !rt.closing; taken++) {
    let step: { taken: number; applied: number };
    try {
      step = await rt.track(applyDuePending(rt));
    } catch (err) {
      rt.options.logger.error({ err }, 'webhook-inbox: applying a pending event failed');
      break;
    }
    if (step.taken === 0) break;
    applied += step.applied;
  }
  return applied;
}
