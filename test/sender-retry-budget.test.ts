/**
 * The sender keeps trying as long as a real provider would. One test per case of the issue
 * that found it giving up too early (numbers in the test names); each failed before the fix.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createInbox, standardWebhooks } from '../src/index.js';
import {
  type AttemptReport,
  createSender,
  InvalidEventError,
  parseRetryAfter,
  type Sender,
} from '../src/sender/index.js';
import { freshPGlite } from './support/databases.js';
import { recordingServer } from './support/recording-server.js';

let sender: Sender | undefined;
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  await sender?.close();
  sender = undefined;
  while (cleanups.length) await cleanups.pop()!().catch(() => {});
  vi.useRealTimers();
  vi.restoreAllMocks();
});

async function server(respond: Parameters<typeof recordingServer>[0]) {
  const s = await recordingServer(respond);
  cleanups.push(s.close);
  return s;
}

describe('1. Retry-After is a floor, not a budget', () => {
  it('a consumer answering 503 Retry-After: 0 twenty times is waited out, not dead-lettered', async () => {
    const s = await server((a) =>
      a.n <= 20 ? { status: 503, headers: { 'retry-after': '0' } } : { status: 200 },
    );
    const retries: AttemptReport[] = [];
    sender = createSender({ endpoint: s.url, baseMs: 1, capMs: 5 });
    sender.on('retry', (r) => retries.push(r));
    expect(await sender.send({ key: 'k', body: {} })).toMatchObject({ status: 'delivered', attempts: 21 });
    expect(retries.every((r) => r.retryAfter && r.counted === false)).toBe(true);
    expect(await sender.deadLetters()).toEqual([]);
  });

  it('by default an event is retried for 24 h, with no attempt limit', async () => {
    // The clock the sender reads (Date) moves an hour per failed attempt, from inside the
    // consumer; timers stay real, so the backoff's millisecond waits still pass.
    const start = Date.now();
    vi.useFakeTimers({ toFake: ['Date'], now: start, shouldAdvanceTime: true });
    const s = await server((a) => {
      vi.setSystemTime(start + (a.n - 1) * 3_600_000);
      return { status: 500 };
    });
    const retries: AttemptReport[] = [];
    // Only the backoff is set (to milliseconds): the budget and the attempt limit are the defaults.
    sender = createSender({ endpoint: s.url, baseMs: 1, capMs: 2, breaker: false });
    sender.on('retry', (r) => retries.push(r));
    const result = await sender.send({ key: 'k', body: {} });
    // Failed at 0 h, 1 h, … 23 h: retried (no limit stopped it at a count); at 24 h: expired.
    expect(retries).toHaveLength(24);
    expect(result).toMatchObject({ status: 'dead-lettered', reason: 'expired', attempts: 25 });
  });

  it('the time budget ends it: still failing after retryForMs, the event is dead-lettered as expired', async () => {
    const s = await server(() => ({ status: 500 }));
    sender = createSender({ endpoint: s.url, baseMs: 5, capMs: 20, retryForMs: 150, breaker: false });
    const result = await sender.send({ key: 'k', body: {} });
    expect(result).toMatchObject({ status: 'dead-lettered', reason: 'expired', responseStatus: 500 });
    expect(s.arrivals.length).toBeGreaterThan(1);
    expect(await sender.deadLetters('k')).toMatchObject([{ reason: 'expired' }]);
  });

  it('reads only delta-seconds and IMF-fixdate: lenient dates are ignored, not read as "now"', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    for (const garbage of [
      'x 2',
      'Mon 5',
      'Thu, 01 Jan 2026',
      '1 Jan 2026 00:00:30 GMT',
      'Fri, 01 Jan 2026 00:00:30 GMT',
    ]) {
      expect(parseRetryAfter(garbage, now), garbage).toBeUndefined();
    }
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:00:30 GMT', now)).toBe(30_000);
    expect(parseRetryAfter('Thu, 30 Feb 2026 00:00:30 GMT', now)).toBeUndefined();
  });

  it('adds jitter to Retry-After (no thundering herd), drawn from the random source', async () => {
    const s = await server((a) =>
      a.n === 1 ? { status: 429, headers: { 'retry-after': '1' } } : { status: 200 },
    );
    const retries: AttemptReport[] = [];
    sender = createSender({ endpoint: s.url, baseMs: 10, random: () => 0.5 });
    sender.on('retry', (r) => retries.push(r));
    await sender.send({ body: {} });
    // 1000 ms floor + half of the 250 ms spread; the backoff (0.5 · 10 ms) is shorter.
    expect(retries.map((r) => r.delayMs)).toEqual([1125]);
  });
});

describe('2. a 409 is the event in flight, not the endpoint failing', () => {
  it('twelve keys answered 409 once each leave the breaker closed', async () => {
    // The twelve first attempts are answered together, so their failures would be consecutive.
    let twelve: () => void = () => {};
    const allArrived = new Promise<void>((resolve) => {
      twelve = resolve;
    });
    const s = await server(async (a) => {
      if (a.n > 12) return { status: 200 };
      if (a.n === 12) twelve();
      await allArrived;
      return { status: 409 };
    });
    const states: string[] = [];
    sender = createSender({
      endpoint: s.url,
      baseMs: 1,
      capMs: 2,
      breaker: { failureThreshold: 10, cooldownMs: 30_000 },
    });
    sender.on('breaker', (state) => states.push(state));
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => sender!.send({ key: `k${i}`, body: {} })),
    );
    expect(results.every((r) => r.status === 'delivered' && r.attempts === 2)).toBe(true);
    expect(states).toEqual([]);
    expect(sender.stats().breaker).toBe('closed');
  });
});

describe('3. breaker probes spend no attempt of the event they carry', () => {
  it('an outage longer than maxAttempts probes does not dead-letter the head', async () => {
    const s = await server((a) => (a.n <= 6 ? { status: 503 } : { status: 200 }));
    const retries: AttemptReport[] = [];
    sender = createSender({
      endpoint: s.url,
      baseMs: 1,
      capMs: 2,
      maxAttempts: 2,
      breaker: { failureThreshold: 1, cooldownMs: 10 },
    });
    sender.on('retry', (r) => retries.push(r));
    expect(await sender.send({ key: 'k', body: {} })).toMatchObject({ status: 'delivered', attempts: 7 });
    // The first failure counted and opened the breaker; the five failed probes after it did not.
    expect(retries.map((r) => [r.probe, r.counted])).toEqual([
      [false, true],
      ...Array.from({ length: 5 }, () => [true, false]),
    ]);
  });
});

describe('5. the dispatcher sleeps when it has no room', () => {
  /**
   * Turns of the timers phase of the event loop: a dispatcher that polled the store with
   * setTimeout(0) would look once in each.
   */
  async function timerTurns(n: number) {
    for (let i = 0; i < n; i++) await new Promise((resolve) => setTimeout(resolve, 0));
  }

  it('while the breaker is open it does not scan the store', async () => {
    const s = await server(() => ({ status: 503 }));
    sender = createSender({
      endpoint: s.url,
      concurrency: 4,
      breaker: { failureThreshold: 4, cooldownMs: 50 },
    });
    const transitions: Array<[string, number]> = [];
    const halfOpen = new Promise<void>((resolve) =>
      sender!.on('breaker', (state) => {
        transitions.push([state, sender!.stats().looks]);
        if (state === 'half-open') resolve();
      }),
    );
    for (let i = 0; i < 200; i++) void sender.send({ key: `k${i}`, body: {} }).catch(() => {});
    await halfOpen;
    const [[, atOpen], [, atHalfOpen]] = transitions;
    // Open until cooldownMs with 196 heads due: a loop polling the store looked dozens of times.
    expect(atHalfOpen - atOpen).toBeLessThanOrEqual(2);
  });

  it('while every slot is taken it waits for a delivery to settle', async () => {
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const s = await server(async () => {
      await held;
      return { status: 200 };
    });
    sender = createSender({ endpoint: s.url, concurrency: 2, breaker: false });
    const sends = Array.from({ length: 50 }, (_, i) => sender!.send({ key: `k${i}`, body: {} }));
    await s.arrived(2);
    const before = sender.stats().looks;
    // Both slots taken and 48 heads due, for as many timer turns as a polling loop needs to show.
    await timerTurns(20);
    expect(sender.stats().looks - before).toBeLessThanOrEqual(1);
    release();
    await Promise.all(sends);
    expect(s.arrivals).toHaveLength(50);
  });
});

describe('7. a second send() of one id waits for the same delivery', () => {
  it('both callers resolve delivered, once the consumer has acknowledged it', async () => {
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const s = await server(async () => {
      await held;
      return { status: 200 };
    });
    sender = createSender({ endpoint: s.url });
    const first = sender.send({ id: 'same', key: 'k', body: {} });
    await s.arrived(1);
    const second = sender.send({ id: 'same', key: 'k', body: {} });
    // Neither caller is answered before the consumer acknowledges: the second waits for the
    // same delivery instead of being told at once that the id is already in line.
    const settled: string[] = [];
    void first.then(() => settled.push('first'));
    void second.then(() => settled.push('second'));
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toEqual([]);
    release();
    expect(await first).toMatchObject({ status: 'delivered', seq: 1 });
    expect(await second).toMatchObject({ status: 'delivered', seq: 1 });
    expect(s.arrivals).toHaveLength(1);
    // Sent again after it was delivered: nothing new goes out.
    expect(await sender.send({ id: 'same', key: 'k', body: {} })).toMatchObject({
      status: 'already-enqueued',
    });
    expect(s.arrivals).toHaveLength(1);
  });
});

describe('8. rawBody is copied at send()', () => {
  it('a caller reusing its buffer does not change what is sent, on any attempt', async () => {
    const s = await server((a) => (a.n === 1 ? { status: 500 } : { status: 200 }));
    sender = createSender({ endpoint: s.url, baseMs: 1, capMs: 1, breaker: false });
    const buffer = Buffer.from('original');
    const sent = sender.send({ rawBody: buffer, contentType: 'text/plain' });
    buffer.write('REUSED!!');
    await sent;
    expect(s.arrivals.map((a) => a.body.toString())).toEqual(['original', 'original']);
  });
});

describe('9. the memory store does not grow without bound', () => {
  it('remembers at most rememberIds delivered ids; a forgotten id is sent again', async () => {
    const s = await server(() => ({ status: 200 }));
    sender = createSender({ endpoint: s.url, rememberIds: 5 });
    for (let i = 0; i < 10; i++) await sender.send({ id: `e${i}`, body: {} });
    expect(await sender.send({ id: 'e9', body: {} })).toMatchObject({ status: 'already-enqueued' });
    expect(await sender.send({ id: 'e0', body: {} })).toMatchObject({ status: 'delivered' });
    expect(s.arrivals.map((a) => a.id)).toEqual([...Array.from({ length: 10 }, (_, i) => `e${i}`), 'e0']);
  });

  it('forgets delivered ids after retentionMs, pruning in the background', async () => {
    const s = await server(() => ({ status: 200 }));
    sender = createSender({ endpoint: s.url, retentionMs: 0 });
    for (let i = 0; i < 3; i++) await sender.send({ id: `p${i}`, body: {} });
    // The dispatcher prunes at most once a second: wait for it, however long the machine takes.
    while (sender.stats().pruned < 3) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await sender.send({ id: 'p0', body: {} })).toMatchObject({ status: 'delivered' });
    expect(s.arrivals.map((a) => a.id)).toEqual(['p0', 'p1', 'p2', 'p0']);
  });
});

describe('10. headers fetch refuses are refused at enqueue', () => {
  it.each([
    'transfer-encoding',
    'expect',
    'keep-alive',
    'upgrade',
    'connection',
    'host',
    'proxy-authorization',
  ])('%s', async (name) => {
    sender = createSender({ endpoint: 'http://127.0.0.1:9/', dispatch: false });
    const error = await sender.enqueue({ body: {}, headers: { [name]: 'x' } }).catch((e) => e);
    expect(error).toBeInstanceOf(InvalidEventError);
    expect(error.field).toBe('headers');
    expect(error.message).toContain(name);
  });
});

describe('12. redirects, and several signing secrets', () => {
  it('follows 307 and 308 with the same method and body; a 301 is not followed', async () => {
    const s = await server((a) => {
      if (a.url === '/webhooks') return { status: 307, headers: { location: '/moved' } };
      if (a.url === '/moved') return { status: 308, headers: { location: '/final' } };
      if (a.url === '/final') return { status: 200 };
      return { status: 404 };
    });
    sender = createSender({ endpoint: s.url, breaker: false });
    expect(await sender.send({ id: 'r1', body: { x: 1 } })).toMatchObject({
      status: 'delivered',
      attempts: 1,
    });
    expect(s.arrivals.map((a) => [a.url, a.method, a.id, a.body.toString()])).toEqual([
      ['/webhooks', 'POST', 'r1', '{"x":1}'],
      ['/moved', 'POST', 'r1', '{"x":1}'],
      ['/final', 'POST', 'r1', '{"x":1}'],
    ]);
    // A 301 may turn a POST into a GET: not followed, and not retried either.
    const moved = await server(() => ({ status: 301, headers: { location: '/elsewhere' } }));
    const other = createSender({ endpoint: moved.url, breaker: false });
    cleanups.push(() => other.close());
    expect(await other.send({ body: {} })).toMatchObject({
      status: 'dead-lettered',
      reason: 'rejected',
      responseStatus: 301,
    });
    expect(moved.arrivals.map((a) => a.url)).toEqual(['/webhooks']);
  });

  it('signs with every secret during a rotation: an inbox knowing either one accepts', async () => {
    const old = `whsec_${Buffer.from('the old key').toString('base64')}`;
    const next = `whsec_${Buffer.from('the new key').toString('base64')}`;
    for (const known of [old, next]) {
      // A PGlite from the suite's template: the default in-memory database would run initdb.
      const inbox = createInbox({
        db: await freshPGlite(),
        verify: standardWebhooks({ secret: known }),
        handle: () => {},
        sweepIntervalMs: 0,
      });
      cleanups.push(() => inbox.close());
      const s = await server(async (a) => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(a.headers)) if (typeof v === 'string') headers[k] = v;
        const outcome = await inbox.receive({ headers, rawBody: a.body });
        return { status: outcome.status };
      });
      const rotating = createSender({ endpoint: s.url, secret: [old, next], breaker: false });
      expect(await rotating.send({ body: { n: 1 } })).toMatchObject({ status: 'delivered' });
      await rotating.close();
      expect(String(s.arrivals[0].headers['webhook-signature']).split(' ')).toHaveLength(2);
    }
  });
});
