import { mismatchOf } from '../dedup/mismatch.js';
import type { CachedEvent } from '../dedup/processed-cache.js';
import type { ParsedDelivery } from '../delivery/delivery.js';
import type { Outcome } from '../outcome.js';
import type { Runtime } from '../runtime/runtime.js';
import * as respond from './respond.js';

/**
 * A retry storm's look before any transaction (duplicate-odds.ts says when): with Redis one GET
 * answers a duplicate that any instance processed; without it, one primary-key read. Undefined
 * on a miss, an error or a timeout: the claim decides.
 */
export async function lookFirst(rt: Runtime, id: string): Promise<CachedEvent | undefined> {
  if (rt.redis) {
    const found = await rt.redis.lookup(id);
    return found.hit ? found.event : undefined;
  }
  return rt.statements.findProcessed(rt.database.acks, rt.options.source, id).catch(() => undefined);
}

/**
 * Answers from a processed event (a Redis entry, or the row read before BEGIN) exactly as the
 * claim would: the same comparisons in the same order (body, then key, then seq), the same
 * responses.
 */
export function fromProcessed(rt: Runtime, d: ParsedDelivery, e: CachedEvent): Outcome {
  const reason = mismatchOf(e, d);
  if (!reason) {
    rt.processed.remember(d.id, d.hash, d.key, d.seq, JSON.stringify(e.result));
    return respond.duplicate(d.id, e.result);
  }
  return respond.decided(rt.options, d, {
    decision: 'mismatch',
    result: null,
    reason,
    expected: null,
    attempts: 0,
    drain: false,
    receivedAt: new Date(),
  });
}
