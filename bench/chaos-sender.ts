/**
 * The chaos suite's at-least-once sender: every event until a 2xx (or a final 422), with capped
 * exponential backoff and full jitter or Retry-After. An ordered key's seqs go a window at a
 * time, so that they overtake each other and the inbox must hold and drain them.
 */
import { Agent } from 'node:http';
import { type Answer, post } from './post.js';
import { type BenchDelivery, shuffle, toRequest } from './workloads.js';

export type ChaosEvent = BenchDelivery;

export interface SenderStats {
  /** Requests sent, the failed ones retried, events acknowledged with a 2xx, ids refused 422. */
  attempts: number;
  retries: number;
  acknowledged: number;
  refused: string[];
  /** The event that took longest from its first attempt to its 2xx. */
  slowest: { id: string; ms: number; attempts: number };
}

export interface SendOptions {
  port: number;
  /** Jobs (keys, batches of unordered events) at once, each with `window` deliveries in flight. */
  concurrency: number;
  window: number;
  /** When to give up (ms since the epoch). */
  deadline: number;
}

export async function send(
  ordered: Map<string, ChaosEvent[]>,
  unordered: ChaosEvent[],
  options: SendOptions,
): Promise<SenderStats> {
  const slowest = { id: '', ms: 0, attempts: 0 };
  const stats: SenderStats = { attempts: 0, retries: 0, acknowledged: 0, refused: [], slowest };
  const agent = new Agent({ keepAlive: true, maxSockets: options.concurrency * options.window });

  const target = `http://127.0.0.1:${options.port}/webhooks`;
  const attempt = (e: ChaosEvent): Promise<Answer> => {
    stats.attempts++;
    return post(agent, target, toRequest(e).headers, e.body, 15_000).catch(() => ({ status: 0 }));
  };

  async function deliver(e: ChaosEvent): Promise<void> {
    const first = Date.now();
    for (let n = 0; ; n++) {
      if (Date.now() > options.deadline)
        throw new Error(`sender deadline passed with ${e.id} unacknowledged`);
      const r = await attempt(e);
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
  for (const events of ordered.values())
    jobs.push(async () => {
      for (let i = 0; i < events.length; i += options.window)
        await Promise.all(events.slice(i, i + options.window).map(deliver));
    });
  for (let i = 0; i < unordered.length; i += options.window) {
    const batch = unordered.slice(i, i + options.window);
    jobs.push(() => Promise.all(batch.map(deliver)).then(() => {}));
  }
  shuffle(jobs); // ordered and unordered work interleaved
  let next = 0;
  await Promise.all(
    Array.from({ length: options.concurrency }, async () => {
      while (next < jobs.length) await jobs[next++]();
    }),
  );
  agent.destroy();
  return stats;
}
