// The budget is time first (`retryForMs`), attempts only with `maxAttempts`, and only failures count.

import type { Attempt } from './attempt.js';
import { fullJitterMs, retryAfterDelayMs } from './backoff.js';
import type { ResolvedSenderOptions } from './options.js';
import type { ClaimedEvent, DeadReason } from './store.js';

export type Decision =
  | { readonly action: 'delivered' }
  | { readonly action: 'dead'; readonly reason: DeadReason }
  | {
      readonly action: 'retry';
      readonly delayMs: number;
      readonly counted: boolean;
      readonly retryAfter: boolean;
    };

export function decide(
  o: ResolvedSenderOptions,
  event: ClaimedEvent,
  a: Attempt,
  probe: boolean,
  now: number,
): Decision {
  if (a.kind === 'ack') return { action: 'delivered' };
  if (a.kind === 'permanent') return { action: 'dead', reason: 'rejected' };
  const counted = a.kind === 'failure' && !probe;
  const failures = event.failures + (counted ? 1 : 0);
  if (counted && o.maxAttempts !== undefined && failures >= o.maxAttempts) {
    return { action: 'dead', reason: 'max-attempts' };
  }
  // The budget ends at the first failure past it: a wait is never cut short (`Retry-After`).
  if (now - event.firstAttemptAt >= o.retryForMs) return { action: 'dead', reason: 'expired' };
  // A "later" answer keeps the event's backoff where it is (at least the first window).
  const n = Math.max(1, failures);
  const retryAfter = a.retryAfterMs !== undefined;
  const delayMs = retryAfter
    ? retryAfterDelayMs(Math.min(a.retryAfterMs!, o.maxRetryAfterMs), n, o.baseMs, o.capMs, o.random)
    : fullJitterMs(n, o.baseMs, o.capMs, o.random);
  return { action: 'retry', delayMs, counted, retryAfter };
}
