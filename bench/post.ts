/**
 * What the benches that post deliveries over a real socket share (bench/deferred.ts,
 * ack-floor.ts, chaos-sender.ts; the percentile for outbox-blocked.ts too).
 */
import { type Agent, request } from 'node:http';

/** An answer: its status, and its Retry-After in seconds when it has one. */
export interface Answer {
  status: number;
  retryAfter?: number;
}

/** POSTs `body` on the caller's agent; rejects on a connection error or after `timeoutMs`. */
export function post(
  agent: Agent,
  target: string,
  headers: Record<string, string | number>,
  body: string,
  timeoutMs?: number,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(target, { method: 'POST', agent, headers, timeout: timeoutMs }, (res) => {
      res.resume();
      res.on('end', () => {
        const retryAfter = Number(res.headers['retry-after']);
        resolve({
          status: res.statusCode ?? 0,
          retryAfter: Number.isFinite(retryAfter) ? retryAfter : undefined,
        });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(body);
  });
}

/** One webhook delivery (a JSON body, its idempotency key); resolves with the status. */
export async function postDelivery(
  agent: Agent,
  target: string,
  id: string,
  body: string,
  headers: Record<string, string> = {},
): Promise<number> {
  const length = Buffer.byteLength(body);
  const all = {
    'content-type': 'application/json',
    'content-length': length,
    'idempotency-key': id,
    ...headers,
  };
  return (await post(agent, target, all, body)).status;
}

/** The value at rank floor(p% of n) of `xs`, sorted (NaN when empty). */
export function percentile(xs: number[], p: number): number {
  const sorted = [...xs].sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}
