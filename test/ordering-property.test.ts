/**
 * The ordering guarantee as a property: whatever the interleaving of a few keys' events, with
 * duplicates, concurrent batches and handler failures (and, on real Postgres, two inbox
 * instances on two pools taking turns at random, the second one's server default REPEATABLE
 * READ), each key's ledger ends up with exactly the entries 1..n, in that order, each once, and
 * the inbox's tables keep their invariants. Each run picks a mode: inline, deferred (workers
 * racing the sender's redeliveries), inline with firstSeq 'first-seen' (the key starts at
 * the first seq applied: the ledger is then exactly start..n), or inline with sweeper passes
 * racing every batch and an instant gap timeout (a seq is then applied once, in order, or, if
 * it arrived after its gap was skipped, dead-lettered as late: never both, never lost), or
 * with poison events (maxAttempts 2, the key blocked) that an operator's replay, racing every
 * batch, brings back until each is applied.
 */
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Inbox, InboxOptions, Outcome } from '../src/index.js';
import { checkInvariants } from '../src/testing/index.js';
import { postgresUrl, type TargetDb, targets } from './support/databases.js';
import { invariantsHoldAfterEach } from './support/invariants.js';
import { type LedgerInbox, ledgerInbox, ordered, range } from './support/ordering.js';
import { sized } from './support/sizes.js';

/** Opening PGlite and migrating can take a minute when the 2-core box is busy. */
const SETUP = 180_000;

const RUNS = sized(8, 24);

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
  /** How the inboxes apply events in this run. */
  mode: Mode;
}

type Mode = 'inline' | 'deferred' | 'first-seen' | 'gap-timeouts' | 'replayed';
const MODES: Mode[] = ['inline', 'deferred', 'first-seen', 'gap-timeouts', 'replayed'];

/**
 * Counterexamples fast-check found, run first on every run. Seed -1904536322: a replay racing
 * a claim of the same key read the key row with SKIP LOCKED, took the locked key for one
 * without a cursor, and re-queued seq 1 without unblocking the key: the ledger stayed empty
 * (src/operations/replay.ts now waits for the key; test/ordering-races.test.ts, case 10).
 */
const COUNTEREXAMPLES: Scenario[] = [
  {
    lengths: [6],
    copies: [2, 2, 3, 1, 1, 2],
    failures: [2, 0, 0, 2, 2, 0],
    order: [1, 0, 5, 8, 4, 6, 3, 7, 10, 9, 2],
    batches: [2],
    instance: [true, false, true, false, false, false, false, false, true, true, false],
    mode: 'replayed',
  },
];

/** Each mode is an inbox of its own source (one set of tables, one ledger). */
const MODE_OPTIONS: Record<Mode, Omit<InboxOptions, 'handle'>> = {
  inline: {},
  deferred: { source: 'deferred', mode: 'deferred', workers: 2, pollIntervalMs: 20 },
  'first-seen': { source: 'first-seen', firstSeq: 'first-seen' },
  // A sweeper pass races every batch, and any gap is past its timeout at once.
  'gap-timeouts': { source: 'gap-timeouts', gapTimeoutMs: 1 },
  // An event failing twice is dead-lettered and blocks its key; an operator's replay of every
  // dead letter races every batch (and runs until none is left).
  replayed: { source: 'replayed', maxAttempts: 2, onPoison: 'block' },
};

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
          mode: fc.constantFrom(...MODES),
        });
      });
  });

invariantsHoldAfterEach();

describe.each(targets)('ordering property on $name', (target) => {
  let t: TargetDb;
  /** The instances of each mode: one, or two on real Postgres. */
  const appsOf = new Map<Mode, LedgerInbox[]>();
  let repeatableRead: pg.Pool | undefined;
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
    if (target.name === 'postgres') {
      // The second instance's server default is REPEATABLE READ: the inbox sets READ
      // COMMITTED on its own transactions, which its SQL relies on.
      repeatableRead = new pg.Pool({
        connectionString: postgresUrl!,
        max: 20,
        options: '-c default_transaction_isolation=repeatable\\ read',
      });
      repeatableRead.on('error', () => {});
    }
    for (const mode of MODES) {
      const apps = [await ledgerInbox(t, { ...options, ...MODE_OPTIONS[mode] }, failing)];
      // PGlite is one embedded session: a second instance is a real-Postgres case.
      if (repeatableRead) {
        apps.push(
          await ledgerInbox({ ...t, db: repeatableRead }, { ...options, ...MODE_OPTIONS[mode] }, failing),
        );
      }
      appsOf.set(mode, apps);
    }
  }, SETUP);
  afterAll(async () => {
    for (const apps of appsOf.values()) for (const app of apps) await app.inbox.close();
    await repeatableRead?.end();
    await t?.close();
  });

  it(`each key's ledger is exactly 1..n, in order, once (${RUNS} runs)`, async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(scenario, async (s) => {
        run++;
        const apps = appsOf.get(s.mode)!;
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
          const receiving = Promise.all(batch.map((d) => d.via.inbox.receive(ordered(d.key, d.seq))));
          const operator = apps[b % apps.length].inbox;
          const racing =
            s.mode === 'gap-timeouts'
              ? operator.sweep()
              : s.mode === 'replayed'
                ? operator.replay({ all: true })
                : undefined;
          const [outcomes] = await Promise.all([receiving, racing]);
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
        // The operator replays what is still dead (blocking its key) until nothing is.
        for (let round = 0; s.mode === 'replayed' && round < 10; round++) {
          const dead = (await apps[0].inbox.deadLetters()).filter((d) => keys.includes(d.key!));
          if (dead.length === 0) break;
          await apps[0].inbox.replay(dead.map((d) => d.id));
          await settle(
            apps.map((a) => a.inbox),
            keys,
          );
        }
        if (s.mode === 'gap-timeouts') {
          for (const [i, key] of keys.entries()) {
            const n = s.lengths[i];
            const account = await apps[0].ledger.account(await apps[0].db(), key);
            const applied = account.entries.map((e) => e.seq!);
            const late = (await apps[0].inbox.deadLetters({ key })).map((d) => {
              expect(d.deadReason).toBe('late');
              return d.seq!;
            });
            // In order, each once; every seq either applied or late, never both.
            expect(applied).toEqual([...applied].sort((x, y) => x - y));
            expect(account.entries.map((e) => e.id)).toEqual(applied.map((seq) => `${key}:${seq}`));
            expect([...applied, ...late].sort((x, y) => x - y)).toEqual(range(1, n));
            expect(await apps[0].inbox.keyState(key)).toMatchObject({ nextSeq: n + 1, heldSeqs: [] });
            events.forEach((e, j) => {
              if (e.key !== key) return;
              const runs = runsOf.get(`${e.key}:${e.seq}`);
              if (late.includes(e.seq)) expect(runs).toBeUndefined();
              else expect(runs).toBe(s.failures[j] + 1);
            });
          }
          expect(await checkInvariants(await apps[0].db(), apps[0].inbox.tables)).toEqual([]);
          return;
        }
        const firstOf = new Map<string, number>();
        for (const [i, key] of keys.entries()) {
          const n = s.lengths[i];
          const account = await apps[0].ledger.account(await apps[0].db(), key);
          // First-seen: the key starts at the first seq applied; earlier ones are from before.
          const first = s.mode === 'first-seen' ? (account.entries[0]?.seq ?? 1) : 1;
          firstOf.set(key, first);
          expect(account.entries.map((e) => e.seq)).toEqual(range(first, n));
          expect(account.entries.map((e) => e.id)).toEqual(range(first, n).map((seq) => `${key}:${seq}`));
          expect(account.balance).toBe((n * (n + 1)) / 2 - ((first - 1) * first) / 2);
          expect(await apps[0].inbox.keyState(key)).toMatchObject({ nextSeq: n + 1, heldSeqs: [] });
          expect(await apps[0].inbox.deadLetters({ key })).toEqual([]);
        }
        // Each injected failure was met (the failing runs happened) and nothing ran after
        // success; under first-seen, a seq below the key's start never ran.
        events.forEach((e, i) => {
          const runs = runsOf.get(`${e.key}:${e.seq}`);
          if (e.seq < firstOf.get(e.key)!) expect(runs).toBeUndefined();
          else expect(runs).toBe(s.failures[i] + 1);
        });
        expect(await checkInvariants(await apps[0].db(), apps[0].inbox.tables)).toEqual([]);
      }),
      { numRuns: RUNS, examples: COUNTEREXAMPLES.map((c) => [c]) },
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
    // A blocked key waits for an operator (the 'replayed' mode's), not for a sweep.
    if (states.every((s) => s && (s.heldSeqs.length === 0 || s.state === 'blocked'))) return;
    await inboxes[pass % inboxes.length].sweep();
  }
  throw new Error('the inboxes did not settle: events are still buffered after 50 sweeper passes');
}
