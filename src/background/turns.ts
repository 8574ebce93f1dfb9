/** Taking a stored event: `take_next`, `take_turn` + `advance` (deferred), or `take_pending` (unordered). */
import type { Context } from '@opentelemetry/api';
import type { Kysely } from 'kysely';
import {
  applyTaken,
  inTransaction,
  type Run,
  recordResult,
  reportCommitted,
  runTaken,
  supersededOrBusy,
} from '../apply/apply.js';
import { sqlState } from '../db/drivers/postgres-error.js';
import { CONTENDED } from '../db/sql/sql-state.js';
import type { TakenEvent } from '../db/sql/taken-event.js';
import type { Runtime } from '../runtime/runtime.js';

export interface Step {
  readonly applied: boolean;
  readonly more: boolean;
  readonly gap?: 'skipped' | 'blocked';
}

export interface Drained {
  readonly applied: number;
  readonly gapsSkipped: number;
  readonly keysBlocked: number;
}

export async function applyNextInline(
  rt: Runtime,
  key: string,
  wait: boolean,
  parent: Context | undefined,
  db?: Kysely<any>,
): Promise<Step> {
  const o = rt.options;
  try {
    const { run, more } = await inTransaction(db ?? rt.database.kysely, async (tx) => {
      const took = await rt.statements.takeNext(tx, o.source, key, wait, rt.lockTimeout);
      if (!took) return { more: false };
      return { run: await applyTaken(rt, tx, took.event, parent), more: took.more };
    });
    reportCommitted(rt, [run]);
    if (run?.status === 'failed') return { applied: false, more: run.failure.drain };
    return { applied: run !== undefined, more };
  } catch (err) {
    // Someone else holds the key: they drain it.
    if (!CONTENDED.has(sqlState(err) ?? '')) o.logger.error({ err, key }, 'webhook-inbox: drain failed');
    return { applied: false, more: false };
  }
}

/** `advance` also settles a timed-out gap after the event, so the drain goes on past it. */
export async function applyTurn(rt: Runtime, key: string): Promise<Step> {
  const o = rt.options;
  const { run, advanced } = await inTransaction(rt.database.kysely, async (tx) => {
    const event = await rt.statements.takeTurn(tx, o.source, key);
    if (!event) return {};
    await rt.statements.takeSavepoint?.(tx);
    const run = await runTaken(rt, tx, event, undefined);
    if (run.status === 'failed') return { run };
    // One round trip more than take_next, the price of not locking the key during the handler.
    const advanced = await rt.statements.advance(
      tx,
      o.source,
      key,
      event.seq!,
      o.gapTimeoutMs,
      o.onGapTimeout,
    );
    await recordResult(rt, tx, run);
    return { run, advanced };
  });
  reportCommitted(rt, [run]);
  if (run) tookPending(rt, run.status === 'applied' || run.failure.decision === 'dead');
  const gap = advanced?.gap;
  if (gap) gapSettled(rt, key, gap.blocked, gap.fromSeq, gap.toSeq);
  // onPoison 'skip' moved the cursor past a poison event: the next seq may be runnable.
  if (run?.status === 'failed') return { applied: false, more: run.failure.drain };
  const settled = gap && (gap.blocked ? 'blocked' : 'skipped');
  return { applied: run !== undefined, more: advanced?.more === true, gap: settled };
}

export function gapSettled(
  rt: Runtime,
  key: string,
  blocked: boolean,
  fromSeq: number | null,
  toSeq: number | null,
): void {
  const o = rt.options;
  rt.metrics.gapTimeout(blocked ? 'blocked' : 'skipped');
  if (blocked) o.logger.info({ key, fromSeq, source: o.source }, 'webhook-inbox: gap timeout, key blocked');
  else o.logger.info({ key, fromSeq, toSeq, source: o.source }, 'webhook-inbox: gap timeout, seqs skipped');
}

const lastGroup = new WeakMap<Runtime, string>();

/** Up to `limit` in one transaction until handlers ran `budgetMs`; `wakeAt`: when a passed group has room. */
export async function applyDuePending(
  rt: Runtime,
  limit = 1,
  budgetMs?: number,
): Promise<{ taken: number; applied: number; wakeAt?: Date | null }> {
  const o = rt.options;
  const groups = o.groups;
  let wakeAt: Date | null = null;
  const runs = await inTransaction(rt.database.kysely, async (tx) => {
    let events: TakenEvent[];
    if (groups) {
      const took = await rt.statements.takeGrouped(tx, o.source, limit, lastGroup.get(rt) ?? null, groups);
      events = took.events;
      wakeAt = took.wakeAt;
      if (events[0]?.group !== undefined) lastGroup.set(rt, events[0].group);
    } else {
      events = await rt.statements.takePending(tx, o.source, limit);
    }
    const runs: Run[] = [];
    const began = performance.now();
    for (const [i, event] of events.entries()) {
      if (i > 0 && budgetMs !== undefined && performance.now() - began >= budgetMs) break;
      await (i === 0 ? rt.statements.takeSavepoint : rt.statements.applySavepoint)?.(tx);
      const decided = await supersededOrBusy(rt, tx, event);
      const run = decided ?? (await runTaken(rt, tx, event, undefined));
      if (!decided && run.status === 'applied') await recordResult(rt, tx, run);
      runs.push(run);
      // RetryLater holding the group: the rest of the batch waits with it.
      if (run.status === 'failed' && run.failure.decision === 'snoozed' && run.failure.error.group) break;
    }
    const rate = events[0]?.group ? groups?.rateOf(events[0].group) : null;
    // After every event row: the group's row is the last lock (src/db/sql/group-state.ts).
    if (rate && runs.length > 0)
      await rt.statements.spendGroupRate(
        tx,
        o.source,
        events[0].group!,
        (runs.length * rate.ms) / rate.count,
      );
    return runs;
  });
  reportCommitted(rt, runs);
  let applied = 0;
  for (const run of runs) {
    if (run.status === 'applied') applied++;
    tookPending(rt, run.status === 'applied' || run.failure.decision === 'dead');
  }
  return { taken: runs.length, applied, wakeAt };
}

function tookPending(rt: Runtime, left: boolean): void {
  if (left) rt.pendingEstimate = Math.max(0, rt.pendingEstimate - 1);
}
