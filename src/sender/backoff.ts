/** Full jitter: many senders' retries spread over the whole window, so a recovering consumer is not hit at once. */
export function fullJitterMs(
  failedAttempts: number,
  baseMs: number,
  capMs: number,
  random: () => number,
): number {
  return Math.floor(random() * backoffCeilingMs(failedAttempts, baseMs, capMs));
}

export function backoffCeilingMs(failedAttempts: number, baseMs: number, capMs: number): number {
  return Math.min(capMs, baseMs * 2 ** Math.min(Math.max(failedAttempts - 1, 0), 40));
}

/** `Retry-After` is a floor, plus up to a quarter of it (at least `baseMs`): keys told "1 s" do not all return at once. */
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

/** An RFC 9110 IMF-fixdate in epoch ms. Strict: `Date.parse` reads `'x 2'` as a past date (an immediate retry). */
export function parseImfFixdate(value: string): number | undefined {
  const m = IMF_FIXDATE.exec(value);
  if (!m) return undefined;
  const [, day, dd, mon, yyyy, hh, mm, ss] = m;
  const month = MONTHS.indexOf(mon);
  if (month < 0) return undefined;
  const at = Date.UTC(Number(yyyy), month, Number(dd), Number(hh), Number(mm), Number(ss));
  const date = new Date(at);
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

/** `Retry-After` (delay-seconds or an IMF-fixdate) as ms from `now`. */
export function parseRetryAfter(value: string | null | undefined, now: number): number | undefined {
  if (value === null || value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d{1,10}$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = parseImfFixdate(trimmed);
  return at === undefined ? undefined : Math.max(0, at - now);
}
