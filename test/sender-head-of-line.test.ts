import { afterEach, describe, expect, it } from 'vitest';
import { createSender, type Sender } from '../src/sender/index.js';
import { recordingServer } from './support/recording-server.js';

let sender: Sender | undefined;
let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await sender?.close();
  await close?.();
});

describe('sender head-of-line', () => {
  it('never sends seq 2 of a key while seq 1 is being retried, and other keys go on meanwhile', async () => {
    let releaseA1: () => void = () => {};
    const b3Arrived = new Promise<void>((resolve) => {
      releaseA1 = resolve;
    });
    let a1Attempts = 0;
    const server = await recordingServer(async (a) => {
      if (a.key === 'B' && a.seq === 3) releaseA1();
      if (a.key !== 'A' || a.seq !== 1) return { status: 200 };
      a1Attempts++;
      // Every kind of retryable failure, one after the other, on the same event.
      if (a1Attempts === 1) return { status: 500 };
      if (a1Attempts === 2) return 'reset';
      if (a1Attempts === 3) {
        // Only answered once key B has gone all the way to seq 3: keys are not blocked by A.
        await b3Arrived;
        return { status: 503 };
      }
      if (a1Attempts === 4) return new Promise(() => {}); // never answers: the sender's timeout
      return { status: 200 };
    });
    close = server.close;
    sender = createSender({ endpoint: server.url, baseMs: 1, capMs: 5, timeoutMs: 300, breaker: false });
    const sends = ['A', 'A', 'A', 'B', 'B', 'B'].map((key) => sender!.send({ key, body: { key } }));
    const results = await Promise.all(sends);

    expect(results.map((r) => [r.key, r.seq, r.status])).toEqual([
      ['A', 1, 'delivered'],
      ['A', 2, 'delivered'],
      ['A', 3, 'delivered'],
      ['B', 1, 'delivered'],
      ['B', 2, 'delivered'],
      ['B', 3, 'delivered'],
    ]);
    const onWireA = server.arrivals.filter((a) => a.key === 'A').map((a) => a.seq);
    expect(onWireA).toEqual([1, 1, 1, 1, 1, 2, 3]);
    // The same id on every attempt of seq 1: retries are recognisable as such.
    expect(new Set(server.arrivals.filter((a) => a.key === 'A' && a.seq === 1).map((a) => a.id)).size).toBe(
      1,
    );
    const lastA1 = server.arrivals.findLast((a) => a.key === 'A' && a.seq === 1)!.n;
    const firstA2 = server.arrivals.find((a) => a.key === 'A' && a.seq === 2)!.n;
    expect(firstA2).toBeGreaterThan(lastA1);
    const b3 = server.arrivals.find((a) => a.key === 'B' && a.seq === 3)!.n;
    expect(b3).toBeLessThan(lastA1);
    expect(server.maxInFlightPerKey).toBe(1);
    expect(sender.stats()).toMatchObject({ delivered: 6, retried: 4, deadLettered: 0, attempts: 10 });
  });

  it('delivers different keys in parallel, up to `concurrency`', async () => {
    let open = 0;
    let maxOpen = 0;
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const server = await recordingServer(async () => {
      open++;
      maxOpen = Math.max(maxOpen, open);
      if (open === 4) release();
      await gate;
      open--;
      return { status: 202 };
    });
    close = server.close;
    sender = createSender({ endpoint: server.url, concurrency: 4, breaker: false });
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => sender!.send({ key: `k${i % 6}`, body: { i } })),
    );
    expect(results.every((r) => r.status === 'delivered' && r.responseStatus === 202)).toBe(true);
    expect(maxOpen).toBe(4);
    expect(server.maxInFlightPerKey).toBe(1);
    for (let k = 0; k < 6; k++) {
      expect(server.arrivals.filter((a) => a.key === `k${k}`).map((a) => a.seq)).toEqual([1, 2]);
    }
  });
});
