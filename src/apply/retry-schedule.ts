/** What follows a failed handler run: another run after a wait, or the dead letter. */
export interface RetryScheduleOptions {
  readonly retryFor: number;
  readonly maxAttempts: number | undefined;
  readonly retryBaseMs: number;
  readonly retryCapMs: number;
}

export type RetryDecision =
  | { readonly dead: false; readonly retryInMs: number }
  | { readonly dead: true; readonly reason: 'poison' | 'rejected' };

/** Capped exponential backoff with full jitter: the wait after `previousAttempts` failed runs. */
export function backoffMs(previousAttempts: number, baseMs: number, capMs: number): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(previousAttempts, 30));
  return Math.floor(Math.random() * ceiling);
}

/** After a failed run with `failedBefore` earlier ones. `rejected`: RejectEvent, dead at once. */
export function retrySchedule(
  o: RetryScheduleOptions,
  failedBefore: number,
  receivedAt: Date,
  rejected: boolean,
  now: number = Date.now(),
): RetryDecision {
  if (rejected) return { dead: true, reason: 'rejected' };
  if (o.maxAttempts !== undefined && failedBefore + 1 >= o.maxAttempts)
    return { dead: true, reason: 'poison' };
  if (now - receivedAt.getTime() >= o.retryFor) return { dead: true, reason: 'poison' };
  return { dead: false, retryInMs: backoffMs(failedBefore, o.retryBaseMs, o.retryCapMs) };
}
