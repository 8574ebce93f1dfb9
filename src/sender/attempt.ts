/**
 * One HTTP attempt's meaning: `ack` (2xx); `later` (409, 425, 429/503 with `Retry-After`: paced, not
 * counted); `failure` (no answer, timeout, 5xx, 408, 429); `permanent` (any other 4xx).
 */
import { parseRetryAfter } from './backoff.js';
import type { ResolvedSenderOptions } from './options.js';
import { signatureHeaders } from './signature.js';
import type { ClaimedEvent } from './store.js';

type AttemptKind = 'ack' | 'later' | 'failure' | 'permanent';

export interface Attempt {
  readonly kind: AttemptKind;
  readonly status: number | null;
  readonly error: string | null;
  /** The consumer's `Retry-After` in ms from now. */
  readonly retryAfterMs: number | undefined;
  readonly replayed: boolean;
}

const MAX_REDIRECTS = 5;

function failure(status: number | null, error: string): Attempt {
  return { kind: 'failure', status, error, retryAfterMs: undefined, replayed: false };
}

function classify(status: number, hasRetryAfter: boolean): AttemptKind {
  if (status >= 200 && status < 300) return 'ack';
  if (status === 409 || status === 425) return 'later';
  if ((status === 429 || status === 503) && hasRetryAfter) return 'later';
  if (status === 408 || status === 429 || status >= 500) return 'failure';
  return 'permanent';
}

function requestHeaders(o: ResolvedSenderOptions, event: ClaimedEvent): Record<string, string> {
  const headers: Record<string, string> = {
    ...event.headers,
    'content-type': event.contentType,
    [o.headers.id]: event.id,
  };
  if (event.key !== null) {
    headers[o.headers.key] = event.key;
    headers[o.headers.seq] = String(event.seq);
  }
  if (o.secretKeys.length > 0) {
    Object.assign(
      headers,
      signatureHeaders(o.secretKeys, event.id, Math.floor(Date.now() / 1000), event.body),
    );
  }
  return headers;
}

/** Sends the event once (following 307/308, five hops at most) and classifies the answer. Never throws. */
export async function attempt(o: ResolvedSenderOptions, event: ClaimedEvent): Promise<Attempt> {
  const headers = requestHeaders(o, event);
  const signal = AbortSignal.timeout(o.timeoutMs);
  let url: URL = o.endpoint;
  try {
    for (let hop = 0; ; hop++) {
      const response = await fetch(url, {
        method: 'POST',
        headers,
        body: event.body,
        signal,
        redirect: 'manual',
      });
      // Read to its end, so the connection goes back to the pool.
      const text = await response.text();
      const status = response.status;
      if (status === 307 || status === 308) {
        const location = response.headers.get('location');
        const next = location ? safeUrl(location, url) : undefined;
        if (next && hop < MAX_REDIRECTS) {
          url = next;
          continue;
        }
        const why = next ? `more than ${MAX_REDIRECTS} redirects` : 'a redirect without a usable Location';
        return failure(status, `HTTP ${status}: ${why}`);
      }
      const retryAfterMs = parseRetryAfter(response.headers.get('retry-after'), Date.now());
      const kind = classify(status, retryAfterMs !== undefined);
      return {
        kind,
        status,
        error: kind === 'ack' ? null : `HTTP ${status}: ${text.slice(0, 200)}`,
        retryAfterMs: kind === 'ack' ? undefined : retryAfterMs,
        replayed: response.headers.get('idempotent-replayed') === 'true',
      };
    }
  } catch (err) {
    const e = err as Error & { cause?: { code?: string; message?: string } };
    return failure(
      null,
      e.name === 'TimeoutError'
        ? `timeout after ${o.timeoutMs} ms`
        : `network error: ${e.cause?.code ?? e.cause?.message ?? e.message}`,
    );
  }
}

function safeUrl(location: string, base: URL): URL | undefined {
  try {
    const url = new URL(location, base);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url : undefined;
  } catch {
    return undefined;
  }
}
