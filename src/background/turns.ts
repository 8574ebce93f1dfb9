/**
 * The three ways a stored event is taken and applied, each one transaction around the one
 * apply path (src/apply/apply.ts):
 * - `applyNextInline`: an ordered key's next event by `take_next`, which locks the key for the
 *   handler's duration (inline mode's drains and the sweeper);
 * - `applyTurn`: the same event by `take_turn`, then `advance` after the handler, without
 *   holding the key's lock meanwhile (deferred mode's workers and drains);
 * - `applyDuePending`: due unordered pending events by `take_pending`, several in one
 *   transaction for workers (`workerBatchSize`), one at a time for the sweeper and
 *   `inbox.replay`.
 */
import type { Context } from '@opentelemetry/api';
import type { Kysely } from 'kysely';
import { applyBatch, applyOne } from '../apply/apply.js';
import { sqlState } from '../db/drivers/postgres-error.js';
import type { Advanced } from '../db/sql/advance.js';
import { CONTENDED } from '../db/sql/sql-state.js';
import type { TakenEvent } from '../db/sql/taken-event.js';
import type { Runtime } from '../runtime/runtime.js';

/**
 * What one step of a drain did: applied an event or not, whether the key's next seq waits, and
 * the timed-out gap after the event it settled (deferred mode's `advance`), once committed.
 */
export interface Step {
  readonly applied: boolean;
  readonly more: boolean;
  readonly gap?: 'skipped' | 'blocked';
}

/**
 * What a drain of a key did: the events it applied, and the gaps its steps settled (a sweeper
 * pass reports them beside its own).
 */
export interface Drained {
  readonly applied: number;
  readonly gapsSkipped: number;
  readonly keysBlocked: number;
}

/**
 * Applies the key's next event by `take_next`. `wait`: wait (bounded) for the key's lock.
 * `db`: a connection the caller holds (a drain right after its delivery), else the pool.
 */
export async function applyNextInline(
  rt: Runtime,
  key: string,
  wait: boolean,
  parent: Context | undefined,
  db?: Kysely<any>,
): Promise<Step> {
  const o = rt.options;
  try {
    const r = await applyOne<{ event?: TakenEvent; more?: boolean }>(rt, {
      take: async (tx) => (await rt.statements.takeNext(tx, o.source, key, wait, rt.lockTimeout)) ?? {},
      parent,
      db,
    });
    if (r.status === 'failed') return { applied: false, more: r.failure?.drain === true };
    return { applied: r.status === 'applied', more: r.took.more === true };
  } catch (err) {
    // Someone else holds the key: they drain it.
    if (!CONTENDED.has(sqlState(err) ?? '')) o.logger.error({ err, key }, 'webhook-inbox: drain failed');
    return { applied: false, more: false };
  }
}

/**
 * Applies the key's next event by `take_turn`, moving the cursor by `advance` before COMMIT.
 * `advance` also settles the gap after the event when it timed out (src/db/sql/advance.ts): the
 * drain then goes on past it, so every due gap of a key is settled as the drain reaches it.
 */
export async function applyTurn(rt: Runtime, key: string): Promise<Step> {
  const o = rt.options;
  let advanced: Advanced | undefined;
  const r = await applyOne(rt, {
    take: async (tx) => ({ event: await rt.statements.takeTurn(tx, o.source, key) }),
    // One round trip more than take_next: the price of not locking the key meanwhile.
    finish: async (tx, event) => {
      advanced = await rt.statements.advance(tx, o.source, key, event.seq!, o.gapTimeoutMs, o.onGapTimeout);
    },
  });
  if (r.status !== 'none') tookPending(rt, r.status === 'applied' || r.failure?.decision === 'dead');
  // Committed: the gap it settled is counted and said as the sweeper says its own.
  const gap = r.status === 'applied' ? advanced?.gap : undefined;
  if (gap) {
    rt.metrics.gapTimeout(gap.blocked ? 'blocked' : 'skipped');
    if (gap.blocked)
      o.logger.info(
        { key, fromSeq: gap.fromSeq, source: o.source },
        'webhook-inbox: gap timeout, key blocked',
      );
    else
      o.logger.info(
        { key, fromSeq: gap.fromSeq, toSeq: gap.toSeq, source: o.source },
        'webhook-inbox: gap timeout, seqs skipped',
      );
  }
  const more = advanced?.more === true;
  // onPoison 'skip' moved the cursor past a poison event: the next seq may be runnable.
  if (r.status === 'failed') return { applied: false, more: r.failure?.drain === true };
  return { applied: r.status === 'applied', more, gap: gap && (gap.blocked ? 'blocked' : 'skipped') };
}

/**
 * Applies due unordered pending events, up to `limit` in one transaction (`take_pending`, then
 * each handler under its own savepoint: src/apply/apply.ts `applyBatch`), stopping before the next
 * once the handlers ran `budgetMs`. What it ran (applied or failed) and what it applied.
 */
export async function applyDuePending(
  rt: Runtime,
  limit = 1,
  budgetMs?: number,
): Promise<{ taken: number; applied: number }> {
  const o = rt.options;
  const runs = await applyBatch(rt, {
    take: (tx) => rt.statements.takePending(tx, o.source, limit),
    budgetMs,
  });
  let applied = 0;
  for (const run of runs) {
    if (run.status === 'applied') applied++;
    tookPending(rt, run.status === 'applied' || run.failure.decision === 'dead');
  }
  return { taken: runs.length, applied };
}

/** A pending event left the queue (applied or dead-lettered): one fewer for `maxPending`. */
function tookPending(rt: Runtime, left: boolean): void {
  if (left) rt.pendingEstimate = Math.max(0, rt.pendingEstimate - 1);
}
