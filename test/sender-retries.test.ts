import { afterEach, describe, expect, it } from 'vitest';
import {
  type AttemptReport,
  backoffCeilingMs,
  createSender,
  fullJitterMs,
  parseRetryAfter,
  type Sender,
} from '../src/sender/index.js';
import { seededRandom } from '../src/testing/index.js';
import { recordingServer } from './support/recording-server.js';

let sender: Sender | undefined;
let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await sender?.close();
  await close?.();
  sender = undefined;
});

describe('full-jitter backoff', () => {
  it('waits a random time in [0, min(cap, base·2^(n−1))) after the n-th failure, drawn from the random source', async () => {
    const server = await recordingServer(() => ({ status: 503 }));
    close = server.close;
    const draws: number[] = [];
    const seeded = seededRandom(7);
    const random = () => {
      const r = seeded();
      draws.push(r);
      return r;
    };
    const retries: AttemptReport[] = [];
    sender = createSender({
      endpoint: server.url,
      baseMs: 2,
      capMs: 20,
      maxAttempts: 9,
      breaker: false,
      random,
    });
    sender.on('retry', (r) => retries.push(r));
    const result = await sender.send({ key: 'k', body: {} });

    expect(result).toMatchObject({
      status: 'dead-lettered',
      reason: 'max-attempts',
      attempts: 9,
      responseStatus: 503,
    });
    expect(server.arrivals).toHaveLength(9);
    expect(retries.map((r) => r.attempt)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    const ceilings = retries.map((r) => backoffCeilingMs(r.attempt, 2, 20));
    expect(ceilings).toEqual([2, 4, 8, 16, 20, 20, 20, 20]);
    for (const [i, r] of retries.entries()) {
      expect(r.retryAfter).toBe(false);
      expect(r.delayMs).toBeGreaterThanOrEqual(0);
      expect(r.delayMs).toBeLessThan(ceilings[i]);
      // Full jitter: the whole window, scaled by the random draw (not base + jitter).
      expect(r.delayMs).toBe(Math.floor(draws[i] * ceilings[i]));
    }
  });

  it('spans the whole window: a draw near 1 waits near the ceiling, a draw of 0 not at all', () => {
    for (let n = 1; n <= 12; n++) {
      const ceiling = Math.min(30_000, 100 * 2 ** (n - 1));
      expect(fullJitterMs(n, 100, 30_000, () => 0)).toBe(0);
      expect(fullJitterMs(n, 100, 30_000, () => 0.999999)).toBe(ceiling - 1);
    }
  });
});

describe('Retry-After', () => {
  it('waits at least the seconds the consumer asks for, plus up to a quarter more (jitter), instead of the backoff', async () => {
    let n = 0;
    const server = await recordingServer(() =>
      ++n === 1 ? { status: 429, headers: { 'retry-after': '1' } } : { status: 200 },
    );
    close = server.close;
    const retries: AttemptReport[] = [];
    sender = createSender({ endpoint: server.url, baseMs: 1, capMs: 2, breaker: false });
    sender.on('retry', (r) => retries.push(r));
    const result = await sender.send({ key: 'k', body: {} });
    expect(result).toMatchObject({ status: 'delivered', attempts: 2 });
    expect(retries).toMatchObject([{ retryAfter: true, status: 429, counted: false }]);
    expect(retries[0].delayMs).toBeGreaterThanOrEqual(1000);
    expect(retries[0].delayMs).toBeLessThan(1250);
    // Without Retry-After the wait would have been under 2 ms.
    expect(server.arrivals[1].at - server.arrivals[0].at).toBeGreaterThanOrEqual(990);
  });

  it('reads an HTTP date, and clamps to `maxRetryAfterMs`', async () => {
    let n = 0;
    const server = await recordingServer(() => {
      n++;
      if (n === 1)
        return { status: 503, headers: { 'retry-after': new Date(Date.now() + 2000).toUTCString() } };
      if (n === 2) return { status: 503, headers: { 'retry-after': '3600' } };
      return { status: 200 };
    });
    close = server.close;
    const retries: AttemptReport[] = [];
    sender = createSender({ endpoint: server.url, maxRetryAfterMs: 1500, breaker: false });
    sender.on('retry', (r) => retries.push(r));
    expect(await sender.send({ body: {} })).toMatchObject({ status: 'delivered', attempts: 3 });
    // The date is ~2 s ahead (whole seconds), clamped to 1.5 s; then a spread of up to a
    // quarter of it or `baseMs` (500 ms by default), whichever is larger.
    expect(retries[0].delayMs).toBeGreaterThan(900);
    expect(retries[0].delayMs).toBeLessThan(1500 + 500);
    expect(retries[1].delayMs).toBeGreaterThanOrEqual(1500);
    expect(retries[1].delayMs).toBeLessThan(1500 + 500);
  });

  it('parses both forms and ignores garbage', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(parseRetryAfter('120', now)).toBe(120_000);
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:00:30 GMT', now)).toBe(30_000);
    expect(parseRetryAfter('Wed, 31 Dec 2025 00:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('-5', now)).toBeUndefined();
    expect(parseRetryAfter('1.5', now)).toBeUndefined();
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(null, now)).toBeUndefined();
  });
});

describe('dead letters', () => {
  it('a permanent 4xx dead-letters at once and keeps the key blocked until retry(key)', async () => {
    let accept = false;
    const server = await recordingServer((a) =>
      a.key === 'A' && a.seq === 1 && !accept ? { status: 400 } : { status: 200 },
    );
    close = server.close;
    sender = createSender({ endpoint: server.url, breaker: false });
    const a1 = sender.send({ key: 'A', body: { n: 1 } });
    const later = [sender.send({ key: 'A', body: { n: 2 } }), sender.send({ key: 'A', body: { n: 3 } })];
    const b = sender.send({ key: 'B', body: {} });
    expect(await a1).toMatchObject({
      status: 'dead-lettered',
      reason: 'rejected',
      attempts: 1,
      responseStatus: 400,
    });
    expect(await b).toMatchObject({ status: 'delivered' });
    await sender.idle();
    // A2 and A3 never went on the wire: the key waits behind its dead letter.
    expect(server.arrivals.filter((x) => x.key === 'A').map((x) => x.seq)).toEqual([1]);
    expect(await sender.deadLetters('A')).toMatchObject([
      { key: 'A', seq: 1, reason: 'rejected', attempts: 1 },
    ]);
    expect(sender.stats()).toMatchObject({ deadLettered: 1, delivered: 1 });

    accept = true;
    expect(await sender.retry('A')).toBe(1);
    const delivered = await Promise.all(later);
    expect(delivered.map((r) => [r.seq, r.status])).toEqual([
      [2, 'delivered'],
      [3, 'delivered'],
    ]);
    expect(server.arrivals.filter((x) => x.key === 'A').map((x) => x.seq)).toEqual([1, 1, 2, 3]);
    expect(await sender.deadLetters()).toEqual([]);
  });

  it('after maxAttempts the key stays blocked; skip(key) lets the later events go without it', async () => {
    const server = await recordingServer((a) =>
      a.key === 'A' && a.seq === 1 ? { status: 500 } : { status: 200 },
    );
    close = server.close;
    sender = createSender({ endpoint: server.url, baseMs: 1, capMs: 2, maxAttempts: 3, breaker: false });
    const a1 = sender.send({ key: 'A', body: {} });
    const a2 = sender.send({ key: 'A', body: {} });
    expect(await a1).toMatchObject({ status: 'dead-lettered', reason: 'max-attempts', attempts: 3 });
    await sender.idle();
    expect(server.arrivals.map((x) => x.seq)).toEqual([1, 1, 1]);
    expect(await sender.skip('A')).toBe(1);
    expect(await a2).toMatchObject({ seq: 2, status: 'delivered' });
    expect(server.arrivals.map((x) => x.seq)).toEqual([1, 1, 1, 2]);
    expect(await sender.deadLetters()).toEqual([]);
  });
});

describe('circuit breaker', () => {
  it('opens after consecutive failures, sends nothing while open, probes once, and closes on success', async () => {
    const server = await recordingServer((a) => (a.n <= 4 ? { status: 503 } : { status: 200 }));
    close = server.close;
    sender = createSender({
      endpoint: server.url,
      concurrency: 1,
      baseMs: 1,
      capMs: 1,
      maxAttempts: 100,
      breaker: { failureThreshold: 3, cooldownMs: 200 },
    });
    const transitions: Array<[string, number]> = [];
    sender.on('breaker', (state) => transitions.push([state, server.arrivals.length]));
    const results = await Promise.all([
      sender.send({ key: 'a', body: {} }),
      sender.send({ key: 'b', body: {} }),
      sender.send({ key: 'c', body: {} }),
    ]);
    expect(results.every((r) => r.status === 'delivered')).toBe(true);
    // Arrivals when each transition happened: nothing was sent between opening and the probe;
    // the first probe (arrival 4) failed and reopened it; the second (5) closed it.
    expect(transitions).toEqual([
      ['open', 3],
      ['half-open', 3],
      ['open', 4],
      ['half-open', 4],
      ['closed', 5],
    ]);
    expect(server.arrivals).toHaveLength(7);
    expect(sender.stats().breaker).toBe('closed');
  });
});
