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
 * `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date. Returns milliseconds from
 * `now`, or undefined when the header is absent or unreadable (then backoff applies).
 */
export function parseRetryAfter(value: string | null | undefined, now: number): number | undefined {
  if (value === null || value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  if (!/[a-z]/i.test(trimmed)) return undefined;
  const at = Date.parse(trimmed);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}
