/**
 * The sender's waits between attempts. It has its own backoff, not the inbox's: the inbox
 * retries a handler that failed on its own database (a base and cap in seconds, no consumer to
 * listen to), while the sender retries a remote endpoint for up to a day and has to obey the
 * consumer's `Retry-After` and spread many senders' retries so a recovering consumer is not
 * hit by all of them at once.
 */

/**
 * Capped exponential backoff with full jitter (the AWS architecture blog's "full jitter"):
 * after the n-th failed attempt (n ≥ 1) the sender waits a uniformly random time in
 * [0, min(capMs, baseMs · 2^(n−1))). Spreading retries over the whole window is what keeps a
 * recovering consumer from being hit by every sender at once.
 */
export function fullJitterMs(
  failedAttempts: number,
  baseMs: number,
  capMs: number,
  random: () => number,
): number {
  return Math.floor(random() * backoffCeilingMs(failedAttempts, baseMs, capMs));
}

/** The upper bound of the jitter window after `failedAttempts` failures. */
export function backoffCeilingMs(failedAttempts: number, baseMs: number, capMs: number): number {
  return Math.min(capMs, baseMs * 2 ** Math.min(Math.max(failedAttempts - 1, 0), 40));
}

/**
 * The wait after a `Retry-After`: the consumer's value is a floor (never earlier than asked),
 * plus a random spread of up to a quarter of it (at least `baseMs`), so every key told "1 s"
 * does not come back in the same millisecond. Never shorter than the jittered backoff either.
 */
export function retryAfterDelayMs(
  retryAfterMs: number,
  failedAttempts: number,
  baseMs: number,
  capMs: number,
  random: () => number,
): number {
  const spread = Math.floor(random() * Math.max(baseMs, Math.floor(retryAfterMs / 4)));
  return Math.max(retryAfterMs + spread, fullJitterMs(failedAttempts, baseMs, capMs, random));
}

const DAYS = ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const IMF_FIXDATE =
  /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d{2}) ([A-Z][a-z]{2}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$/;

/**
 * An RFC 9110 IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) in epoch milliseconds, or
 * undefined. Strict on purpose: V8's `Date.parse` reads garbage such as `'x 2'` or `'Mon 5'`
 * as a date in the past, which would make a retry immediate.
 */
export function parseImfFixdate(value: string): number | undefined {
  const m = IMF_FIXDATE.exec(value);
  if (!m) return undefined;
  const [, day, dd, mon, yyyy, hh, mm, ss] = m;
  const month = MONTHS.indexOf(mon);
  if (month < 0) return undefined;
  const at = Date.UTC(Number(yyyy), month, Number(dd), Number(hh), Number(mm), Number(ss));
  const date = new Date(at);
  // Rejects 31 Feb, 25:00, and a weekday that does not match the date.
  if (
    date.getUTCDate() !== Number(dd) ||
    date.getUTCMonth() !== month ||
    date.getUTCHours() !== Number(hh) ||
    date.getUTCMinutes() !== Number(mm) ||
    date.getUTCSeconds() !== Number(ss) ||
    DAYS[(date.getUTCDay() + 6) % 7] !== day
  ) {
    return undefined;
  }
  return at;
}

/**
 * `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an IMF-fixdate, nothing else. Returns
 * milliseconds from `now`, or undefined when the header is absent or unreadable (then the
 * backoff applies). A date in the past is 0 ms (the backoff still applies: see
 * `retryAfterDelayMs`).
 */
export function parseRetryAfter(value: string | null | undefined, now: number): number | undefined {
  if (value === null || value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d{1,10}$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = parseImfFixdate(trimmed);
  return at === undefined ? undefined : Math.max(0, at - now);
}
