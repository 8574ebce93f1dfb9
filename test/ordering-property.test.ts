/**
 * The ordering guarantee as a property: whatever the interleaving of a few keys' events, with
 * duplicates, concurrent batches and handler failures (and, on real Postgres, two inbox
 * instances on two pools taking turns at random), each key's ledger ends up with exactly the
 * entries 1..n, in that order, each once.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Inbox, Outcome } from '../src/index.js';
import { type TargetDb, targets } from './support/databases.js';
import { type LedgerInbox, ledgerInbox, ordered, range } from './support/ordering.js';

/** Opening PGlite and migrating can take a minute when the 2-core box is busy. */
const SETUP = 180_000;

const RUNS = 15;

interface Scenario {
  /** Events per key: key i has seqs 1..lengths[i]. */
  lengths: number[];
  /** Copies of each event (the sender's retries and duplicates), key-major. */
  copies: number[];
  /** How many times the handler fails for each event before it succeeds, key-major. */
  failures: number[];
  /** The order deliveries are sent in: a permutation of all copies. */
  order: number[];
  /** Sizes of the concurrent batches, cycled. */
  batches: number[];
  /** Which instance receives each delivery (only with two instances). */
  instance: boolean[];
}

const scenario: fc.Arbitrary<Scenario> = fc
  .array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 3 })
  .chain((lengths) => {
    const events = lengths.reduce((a, b) => a + b, 0);
    return fc
      .record({
        copies: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: events, maxLength: events }),
        failures: fc.array(fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 1, max: 2 })), {
          minLength: events,
          maxLength: events,
        }),
      })
      .chain(({ copies, failures }) => {
        const deliveries = copies.reduce((a, b) => a + b, 0);
        const all = range(0, deliveries - 1);
        return fc.record({
          lengths: fc.constant(lengths),
          copies: fc.constant(copies),
          failures: fc.constant(failures),
          order: fc.shuffledSubarray(all, { minLength: deliveries, maxLength: deliveries }),
          batches: fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 5 }),
          instance: fc.array(fc.boolean(), { minLength: deliveries, maxLength: deliveries }),
        });
      });
  });

describe.each(targets)('ordering property on $name', (target) => {
  let t: TargetDb;
  const apps: LedgerInbox[] = [];
  /** Handler runs that must still fail, by event id (deterministic injected failures). */
  const failuresLeft = new Map<string, number>();
  const runsOf = new Map<string, number>();

  beforeAll(async () => {
    t = await target.open();
    const options = { retryBaseMs: 1, retryCapMs: 1, maxAttempts: 5, gapTimeoutMs: 600_000 };
    const failing: Parameters<typeof ledgerInbox>[2] = (handle) => (event, context) => {
      runsOf.set(event.id, (runsOf.get(event.id) ?? 0) + 1);
      const left = failuresLeft.get(event.id) ?? 0;
      if (left > 0) {
        failuresLeft.set(event.id, left - 1);
        throw new Error(`injected failure of ${event.id}`);
      }
      return handle(event, context);
    };
    apps.push(await ledgerInbox(t, options, failing));
    // PGlite is one embedded session: a second instance is a real-Postgres case.
    if (target.name === 'postgres') apps.push(await ledgerInbox({ ...t, db: t.another() }, options, failing));
  }, SETUP);
  afterAll(async () => {
    for (const app of apps) await app.inbox.close();
    await t?.close();
  });

  it(`each key's ledger is exactly 1..n, in order, once (${RUNS} runs)`, async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(scenario, async (s) => {
        run++;
        const keys = s.lengths.map((_, i) => `p${run}-k${i}`);
        const events = keys.flatMap((key, i) => range(1, s.lengths[i]).map((seq) => ({ key, seq })));
        events.forEach((e, i) => {
          failuresLeft.set(`${e.key}:${e.seq}`, s.failures[i]);
        });
        const copies = events.flatMap((e, i) => Array.from({ length: s.copies[i] }, () => e));
        const queue = s.order.map((i) => ({ ...copies[i], via: apps[s.instance[i] ? apps.length - 1 : 0] }));

        // The sender: concurrent batches; a delivery answered 5xx or 409 is sent again later.
        const finals: Outcome[] = [];
        for (let b = 0; queue.length > 0; b++) {
          const batch = queue.splice(0, s.batches[b % s.batches.length]);
          const outcomes = await Promise.all(batch.map((d) => d.via.inbox.receive(ordered(d.key, d.seq))));
          outcomes.forEach((outcome, i) => {
            if (outcome.status === 500 || outcome.status === 409) queue.push(batch[i]);
            else finals.push(outcome);
          });
        }
        expect(finals.map((o) => o.status).filter((status) => status !== 200 && status !== 202)).toEqual([]);

        // Every delivery was acknowledged; what is still buffered applies in drains and sweeps.
        await settle(
          apps.map((a) => a.inbox),
          keys,
        );
        for (const [i, key] of keys.entries()) {
          const n = s.lengths[i];
          const account = await apps[0].ledger.account(await apps[0].db(), key);
          expect(account.entries.map((e) => e.seq)).toEqual(range(1, n));
          expect(account.entries.map((e) => e.id)).toEqual(range(1, n).map((seq) => `${key}:${seq}`));
          expect(account.balance).toBe((n * (n + 1)) / 2);
          expect(await apps[0].inbox.keyState(key)).toMatchObject({ nextSeq: n + 1, heldSeqs: [] });
          expect(await apps[0].inbox.deadLetters({ key })).toEqual([]);
        }
        // Each injected failure was met (the failing runs happened) and nothing ran after success.
        events.forEach((e, i) => {
          expect(runsOf.get(`${e.key}:${e.seq}`)).toBe(s.failures[i] + 1);
        });
      }),
      { numRuns: RUNS },
    );
  });
});

/**
 * Waits until no instance is draining and no key has anything buffered, running sweeper passes
 * (as every instance does on its own) in between. Failed runs retry at once (retryCapMs 1), so
 * a few passes suffice; the bound turns a livelock into a failure.
 */
async function settle(inboxes: Inbox[], keys: string[]): Promise<void> {
  for (let pass = 0; pass < 50; pass++) {
    await Promise.all(inboxes.map((i) => i.idle()));
    const states = await Promise.all(keys.map((key) => inboxes[0].keyState(key)));
    if (states.every((s) => s && s.heldSeqs.length === 0)) return;
    await inboxes[pass % inboxes.length].sweep();
  }
  throw new Error('the inboxes did not settle: events are still buffered after 50 sweeper passes');
}
