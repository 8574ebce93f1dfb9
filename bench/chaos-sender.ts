/**
 * A minimal at-least-once sender for the chaos suite (until the project's own sender is used):
 * retries every event until it gets a 2xx (or a 422: the handler rejected it for good, which
 * is final, as it is for real senders), with capped exponential backoff and full jitter,
 * honouring Retry-After (capped). Ordered keys send a window of consecutive seqs at once, so
 * they overtake each other on the way and the inbox must hold and drain them.
 */
import { Agent, request as httpRequest } from 'node:http';

export interface ChaosEvent {
  id: string;
  key?: string;
  seq?: number;
  body: string;
}

export interface SenderStats {
  /** HTTP requests sent (every attempt). */
  attempts: number;
  /** Attempts that failed (non-2xx or connection error) and were retried. */
  retries: number;
  /** Events acknowledged with a 2xx. */
  acknowledged: number;
  /** Events refused for good (422, RejectEvent): final, not retried. */
  refused: string[];
  byStatus: Record<string, number>;
  /** The event that took longest from its first attempt to its 2xx, and how long (ms). */
  slowest: { id: string; ms: number; attempts: number };
}

export interface SendOptions {
  port: number;
  /** Keys sent at once. */
  concurrency: number;
  /** Consecutive seqs of one key in flight at once. */
  window: number;
  /** Give up (and report) after this long. */
  deadline: number;
}

export async function send(
  ordered: Map<string, ChaosEvent[]>,
  unordered: ChaosEvent[],
  options: SendOptions,
): Promise<SenderStats> {
  const stats: SenderStats = {
    attempts: 0,
    retries: 0,
    acknowledged: 0,
    refused: [],
    byStatus: {},
    slowest: { id: '', ms: 0, attempts: 0 },
  };
  const agent = new Agent({ keepAlive: true, maxSockets: options.concurrency * options.window });

  function attempt(e: ChaosEvent): Promise<{ status: number; retryAfter?: number }> {
    stats.attempts++;
    const headers: Record<string, string> = { 'content-type': 'application/json', 'idempotency-key': e.id };
    if (e.key !== undefined) {
      headers['x-key'] = e.key;
      headers['x-seq'] = String(e.seq);
    }
    return new Promise((resolve) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port: options.port,
          method: 'POST',
          path: '/webhooks',
          headers,
          agent,
          timeout: 15_000,
        },
        (res) => {
          res.resume();
          res.on('end', () => {
            const ra = Number(res.headers['retry-after']);
            resolve({ status: res.statusCode ?? 0, retryAfter: Number.isFinite(ra) ? ra : undefined });
          });
          res.on('error', () => resolve({ status: 0 }));
        },
      );
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', () => resolve({ status: 0 }));
      req.end(e.body);
    });
  }

  async function deliver(e: ChaosEvent): Promise<void> {
    const first = Date.now();
    for (let n = 0; ; n++) {
      if (Date.now() > options.deadline)
        throw new Error(`sender deadline passed with ${e.id} unacknowledged`);
      const r = await attempt(e);
      stats.byStatus[r.status] = (stats.byStatus[r.status] ?? 0) + 1;
      if (r.status >= 200 && r.status < 300) {
        stats.acknowledged++;
        const ms = Date.now() - first;
        if (ms > stats.slowest.ms) stats.slowest = { id: e.id, ms, attempts: n + 1 };
        return;
      }
      if (r.status === 422) {
        stats.refused.push(e.id);
        return;
      }
      stats.retries++;
      const backoff = Math.random() * Math.min(1000, 20 * 2 ** n);
      const wait = r.retryAfter !== undefined ? Math.min(1000, r.retryAfter * 1000) : backoff;
      await new Promise((res) => setTimeout(res, wait));
    }
  }

  // A work list: each ordered key is one job (its seqs in windows), each unordered event one job.
  const jobs: Array<() => Promise<void>> = [];
  for (const events of ordered.values()) {
    jobs.push(async () => {
      for (let i = 0; i < events.length; i += options.window) {
        await Promise.all(events.slice(i, i + options.window).map(deliver));
      }
    });
  }
  for (let i = 0; i < unordered.length; i += options.window) {
    const batch = unordered.slice(i, i + options.window);
    jobs.push(() => Promise.all(batch.map(deliver)).then(() => {}));
  }
  // Interleave ordered and unordered work.
  for (let i = jobs.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [jobs[i], jobs[j]] = [jobs[j], jobs[i]];
  }
  let next = 0;
  await Promise.all(
    Array.from({ length: options.concurrency }, async () => {
      while (next < jobs.length) await jobs[next++]();
    }),
  );
  agent.destroy();
  return stats;
}
