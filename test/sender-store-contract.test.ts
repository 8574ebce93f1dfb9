/**
 * One suite, every store: the memory store and the Postgres outbox (on PGlite, and on a real
 * server when one answers) must behave alike, because the dispatcher relies on the same
 * guarantees from both. Numbers refer to the cases of the issue that found them disagreeing.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { InvalidEventError, MemoryStore, OutboxStore, type SenderStore } from '../src/sender/index.js';
import type { ClaimedEvent, NewEvent } from '../src/sender/store.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';

interface Opened {
  readonly store: SenderStore;
  close(): Promise<void>;
}

const stores: Array<{ name: string; open(): Promise<Opened> }> = [
  {
    name: 'memory',
    async open() {
      const store = new MemoryStore();
      return { store, close: () => store.close() };
    },
  },
  ...targets.map((target) => {
    // One database per target for the file (a PGlite costs a second of CPU to start), a
    // fresh outbox schema per test, dropped after it.
    let shared: Promise<TargetDb> | undefined;
    afterAll(async () => {
      await (await shared)?.close();
    });
    return {
      name: `outbox on ${target.name}`,
      async open(): Promise<Opened> {
        shared ??= target.open();
        const t = await shared;
        const schema = uniqueName('outbox');
        const store = await OutboxStore.open(t.db, { schema, migrate: true, poolSize: 4 });
        return {
          store,
          close: async () => {
            await store.close();
            await (t.db as { query(text: string): Promise<unknown> }).query(
              `drop schema "${schema}" cascade`,
            );
          },
        };
      },
    };
  }),
];

function event(id: string, key: string | null = null, seq: number | null = null): NewEvent {
  return { id, key, seq, body: Buffer.from(`{"id":"${id}"}`), contentType: 'application/json', headers: {} };
}

const LEASE = 60_000;
const ids = (claimed: ClaimedEvent[]) => claimed.map((c) => c.id).sort();

let opened: Opened | undefined;
afterEach(async () => {
  await opened?.close();
  opened = undefined;
});

describe.each(stores)('store contract: $name', (kind) => {
  async function open(): Promise<SenderStore> {
    opened = await kind.open();
    return opened.store;
  }

  it('hands out only the head of each key, one at a time, in seq order', async () => {
    const store = await open();
    for (const [id, key] of [
      ['a1', 'A'],
      ['a2', 'A'],
      ['b1', 'B'],
      ['u1', null],
    ] as const) {
      await store.add(event(id, key));
    }
    const first = await store.claim(10, LEASE);
    expect(ids(first)).toEqual(['a1', 'b1', 'u1']);
    expect(first.find((c) => c.id === 'a1')).toMatchObject({ seq: 1, attempt: 1, failures: 0 });
    expect(await store.claim(10, LEASE)).toEqual([]);
    for (const c of first) await store.delivered(c, 200);
    expect(ids(await store.claim(10, LEASE))).toEqual(['a2']);
  });

  it('4. refuses a late, lower seq while a higher one is in flight: never two events of a key at once', async () => {
    const store = await open();
    await store.add(event('k5', 'K', 5));
    const [head] = await store.claim(10, LEASE);
    expect(head).toMatchObject({ id: 'k5', seq: 5 });
    const error = await store.add(event('k3', 'K', 3)).catch((e) => e);
    expect(error).toBeInstanceOf(InvalidEventError);
    expect(error.field).toBe('seq');
    expect(error.message).toContain('3 is not above');
    expect(await store.claim(10, LEASE)).toEqual([]);
    expect(await store.outstanding()).toBe(1);
  });

  it('11. refuses a second id at a (key, seq) already taken, the same way', async () => {
    const store = await open();
    await store.add(event('first', 'K', 1));
    const error = await store.add(event('second', 'K', 1)).catch((e) => e);
    expect(error).toBeInstanceOf(InvalidEventError);
    expect(error.field).toBe('seq');
    // The same id again is not an error: it is stored once.
    expect(await store.add(event('first', 'K', 1))).toMatchObject({ created: false, seq: 1, settled: false });
  });

  it('11. two concurrent enqueues of one unordered id: one stored, the other told so', async () => {
    const store = await open();
    const both = await Promise.all([store.add(event('same')), store.add(event('same'))]);
    expect(both.map((e) => e.created).sort()).toEqual([false, true]);
    expect(ids(await store.claim(10, LEASE))).toEqual(['same']);
  });

  it('11. unordered dead letters can be retried and skipped by id', async () => {
    const store = await open();
    await store.add(event('u1'));
    await store.add(event('u2'));
    for (const c of await store.claim(10, LEASE)) await store.deadLetter(c, 'rejected', 'HTTP 400: no');
    expect((await store.deadLetters()).map((d) => d.id).sort()).toEqual(['u1', 'u2']);
    expect(await store.retry({ id: 'u1' })).toBe(1);
    expect(await store.skip({ id: 'u2' })).toBe(1);
    expect(await store.deadLetters()).toEqual([]);
    expect(await store.claim(10, LEASE)).toMatchObject([{ id: 'u1', attempt: 1, failures: 0 }]);
    expect(await store.add(event('u2'))).toMatchObject({ created: false, settled: true });
  });

  it('a dead letter blocks its key (not counted as outstanding) until retried or skipped', async () => {
    const store = await open();
    for (let i = 1; i <= 4; i++) await store.add(event(`d${i}`, 'D'));
    await store.add(event('e1', 'E'));
    const claimed = await store.claim(10, LEASE);
    await store.deadLetter(claimed.find((c) => c.id === 'd1')!, 'max-attempts', 'HTTP 500: down');
    await store.delivered(claimed.find((c) => c.id === 'e1')!, 200);
    expect(await store.outstanding()).toBe(0);
    expect(await store.claim(10, LEASE)).toEqual([]);
    expect(await store.deadLetters('D')).toMatchObject([
      { id: 'd1', seq: 1, reason: 'max-attempts', attempts: 1 },
    ]);

    expect(await store.retry('D')).toBe(1);
    expect(await store.outstanding()).toBe(4);
    const [again] = await store.claim(10, LEASE);
    expect(again).toMatchObject({ id: 'd1', attempt: 1, failures: 0 });
    await store.deadLetter(again, 'rejected', 'HTTP 400: still no');
    expect(await store.skip('D')).toBe(1);
    expect(await store.outstanding()).toBe(3);
    expect(ids(await store.claim(10, LEASE))).toEqual(['d2']);
  });

  it('counts failures only when told to, and keeps the first attempt time across retries', async () => {
    const store = await open();
    await store.add(event('r', 'R'));
    const [a1] = await store.claim(10, LEASE);
    await store.retryLater(a1, 0, 'HTTP 503: later', false);
    const [a2] = await store.claim(10, LEASE);
    expect(a2).toMatchObject({ attempt: 2, failures: 0, firstAttemptAt: a1.firstAttemptAt });
    await store.retryLater(a2, 0, 'HTTP 500: failed', true);
    const [a3] = await store.claim(10, LEASE);
    expect(a3).toMatchObject({ attempt: 3, failures: 1, firstAttemptAt: a1.firstAttemptAt });
    expect(Math.abs(a1.firstAttemptAt - Date.now())).toBeLessThan(60_000);
    // A retry in the future is not handed out before it is due.
    await store.retryLater(a3, 60_000, 'HTTP 500: failed', true);
    expect(await store.claim(10, LEASE)).toEqual([]);
    expect(await store.outstanding()).toBe(1);
  });

  it('a lease that runs out without a completion hands the event out again; the stale completion is ignored', async () => {
    const store = await open();
    await store.add(event('l', 'L'));
    await store.add(event('l2', 'L'));
    const [first] = await store.claim(10, 50);
    let again: ClaimedEvent[] = [];
    const deadline = Date.now() + 10_000;
    while (again.length === 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      again = await store.claim(10, LEASE);
    }
    expect(again).toMatchObject([{ id: 'l', attempt: 2 }]);
    await store.delivered(first, 200); // the old lease: no effect
    expect(await store.claim(10, LEASE)).toEqual([]);
    await store.delivered(again[0], 200);
    expect(ids(await store.claim(10, LEASE))).toEqual(['l2']);
  });

  it('9. forgets delivered events after the retention window; an id enqueued again then is new', async () => {
    const store = await open();
    await store.add(event('p1', 'P'));
    await store.add(event('p2'));
    for (const c of await store.claim(10, LEASE)) await store.delivered(c, 200);
    expect(await store.add(event('p1', 'P'))).toMatchObject({ created: false, settled: true });
    expect(await store.prune(3_600_000)).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(await store.prune(0)).toBe(2);
    expect(await store.add(event('p2'))).toMatchObject({ created: true });
    // The key's seqs keep growing: the consumer has seen seq 1 already.
    expect(await store.add(event('p1', 'P'))).toMatchObject({ created: true, seq: 2 });
  });
});
