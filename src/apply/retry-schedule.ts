/**
 * What follows a failed handler run: another run after a wait, or the dead letter. The one
 * place the inbox decides it, for every path that applies an event (src/apply/apply.ts
 * `recordFailure`: a delivery, a drain, the sweeper, a worker).
 *
 * The budget is time, as providers budget theirs (Stripe retries for three days, Svix for about
 * a day, this project's sender for `retryForMs`): an outage of a deploy, a migration or a
 * downstream API costs retries, not dead letters. Counting attempts alone dead-lettered a
 * twenty-second blip (5 attempts from 1 s with full jitter spend about 15 s). `maxAttempts`,
 * when given, still bounds it. The budget runs from the event's arrival (`received_at`): a
 * failure after it ends the retries (a wait is never cut short to fit it).
 */

/** The options the schedule reads (ResolvedOptions has them). */
export interface RetryScheduleOptions {
  /** Milliseconds. */
  readonly retryFor: number;
  readonly maxAttempts: number | undefined;
  readonly retryBaseMs: number;
  readonly retryCapMs: number;
}

export type RetryDecision =
  | { readonly dead: false; readonly retryInMs: number }
  | { readonly dead: true; readonly reason: 'poison' | 'rejected' };

/**
 * Capped exponential backoff with full jitter (the AWS architecture blog's "full jitter"): the
 * wait before an event whose handler failed `previousAttempts` times is run again.
 */
export function backoffMs(previousAttempts: number, baseMs: number, capMs: number): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(previousAttempts, 30));
  return Math.floor(Math.random() * ceiling);
}

/**
 * After a run that failed: `failedBefore` earlier failed runs, the event received at
 * `receivedAt`. `rejected`: the handler threw RejectEvent, dead at once.
 */
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
