import { mismatchOf } from '../dedup/mismatch.js';
import type { CachedEvent } from '../dedup/processed-cache.js';
import type { ParsedDelivery } from '../delivery/delivery.js';
import { firstTime, recovered } from '../observability/logger.js';
import type { Outcome } from '../outcome.js';
import type { Runtime } from '../runtime/runtime.js';
import * as respond from './respond.js';

/** One Redis GET, else one primary-key read; undefined on a miss or an error (the claim decides). */
export async function lookFirst(rt: Runtime, id: string): Promise<CachedEvent | undefined> {
  if (rt.redis) {
    const found = await rt.redis.lookup(id);
    return found.hit ? found.event : undefined;
  }
  const { logger, source } = rt.options;
  try {
    const found = await rt.statements.findProcessed(rt.database.acks, source, id);
    recovered(logger, LOOK_FIRST_FAILED);
    return found;
  } catch (err) {
    rt.metrics.lookFirstError();
    (firstTime(logger, LOOK_FIRST_FAILED) ? logger.warn : logger.debug)(
      { err, source, id },
      'webhook-inbox: the read before BEGIN failed; the claim answers the delivery',
    );
    return undefined;
  }
}

const LOOK_FIRST_FAILED = 'look-first';

/** Answers from a processed event exactly as the claim would: the same comparisons, the same responses. */
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
