import type { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type Inbox, type InboxOptions } from '../src/index.js';
import { CountingPool } from './support/counting-pool.js';
import { freshPGlite, postgresTarget, postgresUrl, type TargetDb } from './support/databases.js';

/** Runs `fn` on an inbox once it is ready, and closes the inbox whatever happens. */
async function using(inbox: Inbox, fn: (inbox: Inbox) => Promise<void>): Promise<void> {
  try {
    await inbox.ready();
    await fn(inbox);
  } finally {
    await inbox.close();
  }
}

const receiveOn = (on: Inbox, id: string, body = '{}') =>
  on.receive({
    headers: { 'idempotency-key': id, 'content-type': 'application/json' },
    rawBody: Buffer.from(body),
  });

// The hot path's round trips are a promise (see the comment at the top of src/receive/pipeline.ts);
// this pins them, so a change that adds one has to change this test and say why. Each test makes
// the events it counts on itself (a duplicate, a failed event, a key), and closes what it opens
// in `finally`: one failure leaves the next test as it would have found it.
describe.runIf(postgresTarget)('round trips to Postgres per delivery', () => {
  let t: TargetDb;
  let pool: CountingPool;
  let inbox: Inbox;
  let returnResult = true;
  /** Runs `fn` with a handler that returns nothing, and restores it even when `fn` fails. */
  async function withoutResult(fn: () => Promise<void>): Promise<void> {
    returnResult = false;
    try {
      await fn();
    } finally {
      returnResult = true;
    }
  }
  /** An inbox of its own on the counted pool, closed after `fn` whatever happens. */
  const withInbox = (options: Partial<InboxOptions>, fn: (other: Inbox) => Promise<void>) =>
    using(createInbox({ db: pool, schema: t.schema, sweepIntervalMs: 0, handle: () => {}, ...options }), fn);
  const failingHandler: InboxOptions['handle'] = async (_e, { tx }) => {
    await tx.selectNoFrom((eb) => eb.lit(1).as('one')).execute();
    throw new Error('no');
  };
  beforeAll(async () => {
    t = await postgresTarget!.open();
    pool = new CountingPool(postgresUrl!);
    inbox = createInbox({
      db: pool,
      schema: t.schema,
      sweepIntervalMs: 0,
      handle: async (_e, { tx }) => {
        await tx.selectNoFrom((eb) => eb.lit(1).as('one')).execute(); // the handler's own statement
        return returnResult ? { ok: true } : undefined;
      },
    });
    await inbox.ready();
  });
  afterAll(async () => {
    await inbox.close();
    await pool.end();
    await t.close();
  });
  const deliver = (id: string, extra: Record<string, string> = {}) =>
    inbox.receive({
      headers: { 'idempotency-key': id, 'content-type': 'application/json', ...extra },
      rawBody: Buffer.from('{}'),
    });

  it('a new event: BEGIN with the claim, the handler, its row with the result and COMMIT (as a bare transaction)', async () => {
    pool.reset();
    expect((await deliver('rt-1')).kind).toBe('processed');
    const sent = pool.reset();
    expect(sent).toHaveLength(3);
    // A fold is one simple query: `execute "wi:<schema>.<statement>"(<its values>)` of statements
    // PREPAREd once per connection (src/db/drivers/prepared-folds.ts), not per delivery. The
    // try-claim (src/db/sql/try-claim.ts) took the id's advisory lock and read no row, so the
    // claim function is not called; the row is inserted once, with its result, on COMMIT.
    expect(sent[0]).toMatch(
      /^begin isolation level read; execute "wi:[^"]+\.try_id_lock"\('default', 'rt-1'\); execute "wi:[^"]+\.try_claim"\('default', 'rt-1'\); savepoint wi_apply$/,
    );
    expect(sent[2]).toMatch(/^execute "wi:[^"]+\.record_applied"\('default', 'rt-1', .*; commit$/);
    expect(await inbox.event('rt-1')).toMatchObject({ status: 'processed', result: { ok: true } });
  });

  it('a new event whose handler returns nothing: the same, its row (no result) with COMMIT', () =>
    withoutResult(async () => {
      pool.reset();
      expect((await deliver('rt-2')).kind).toBe('processed');
      const sent = pool.reset();
      expect(sent).toHaveLength(3);
      expect(sent[2]).toMatch(/^execute "wi:[^"]+\.record_applied"\('default', 'rt-2', .*; commit$/);
      expect(await inbox.event('rt-2')).toMatchObject({ status: 'processed', result: null });
    }));

  it('an ordered event whose handler returns nothing: the same, its row (key, seq, no result) with COMMIT', () =>
    withoutResult(async () => {
      pool.reset();
      expect((await deliver('rt-o0', { 'x-key': 'k0', 'x-seq': '1' })).kind).toBe('processed');
      const sent = pool.reset();
      expect(sent).toHaveLength(3);
      expect(sent[2]).toMatch(/^execute "wi:[^"]+\.record_applied"\('default', 'rt-o0', 'k0',.*; commit$/);
      expect(await inbox.event('rt-o0')).toMatchObject({
        status: 'processed',
        key: 'k0',
        seq: 1,
        result: null,
      });
    }));

  it('a duplicate of an event this instance processed: none (the in-process LRU)', async () => {
    expect((await deliver('rt-lru')).kind).toBe('processed');
    pool.reset();
    const outcome = await deliver('rt-lru');
    expect(outcome).toMatchObject({ kind: 'duplicate', body: { result: { ok: true } } });
    expect(outcome.headers['idempotent-replayed']).toBe('true');
    expect(pool.reset()).toEqual([]);
  });

  it('a duplicate another instance processed: BEGIN with the try-claim, COMMIT; in a retry storm, one read', () =>
    withInbox({}, async (other) => {
      const duplicateOf = (id: string) => receiveOn(other, id);
      expect((await deliver('rt-dup')).kind).toBe('processed');
      pool.reset();
      const outcome = await duplicateOf('rt-dup');
      expect(outcome).toMatchObject({ kind: 'duplicate', body: { result: { ok: true } } });
      expect(pool.reset()).toEqual([
        expect.stringMatching(/^begin .*; execute "wi:[^"]+\.try_claim"/),
        'commit',
      ]);
      // Duplicates of events the other processed keep coming (none is in this one's memory):
      // once most deliveries are duplicates, a primary-key read answers each in one round trip.
      for (let i = 0; i < 8; i++) {
        expect((await deliver(`rt-storm-${i}`)).kind).toBe('processed');
        expect((await duplicateOf(`rt-storm-${i}`)).kind).toBe('duplicate');
      }
      pool.reset();
      expect((await deliver('rt-storm-last')).kind).toBe('processed');
      pool.reset();
      expect((await duplicateOf('rt-storm-last')).body).toMatchObject({
        status: 'duplicate',
        result: { ok: true },
      });
      expect(pool.reset()).toEqual([expect.stringMatching(/^select body_hash, key, seq,/)]);
    }));

  it('the LRU never hides a mismatch: a different body goes to Postgres and is 422', async () => {
    expect((await deliver('rt-mismatch')).kind).toBe('processed');
    pool.reset();
    const outcome = await receiveOn(inbox, 'rt-mismatch', '{"other": true}');
    expect(outcome.status).toBe(422);
    expect(pool.reset()).toHaveLength(2);
  });

  it('an ordered event in its turn costs what an unordered one does: its row with the result and COMMIT', async () => {
    pool.reset();
    expect((await deliver('rt-o1', { 'x-key': 'k', 'x-seq': '1' })).kind).toBe('processed');
    const sent = pool.reset();
    expect(sent).toHaveLength(3);
    // The claim moved the cursor and wrote no row (the key row's lock holds the seq); the row
    // is inserted once, with its key, seq and result, on COMMIT.
    expect(sent[0]).toMatch(/^begin isolation level read; execute "wi:[^"]+\.claim"\(/);
    expect(sent[2]).toMatch(/^execute "wi:[^"]+\.record_applied"\('default', 'rt-o1', 'k',.*; commit$/);
    expect(await inbox.event('rt-o1')).toMatchObject({
      status: 'processed',
      key: 'k',
      seq: 1,
      attempts: 0,
      result: { ok: true },
    });
  });

  it('a handler that throws: BEGIN with the claim, the handler, the failure recorded with COMMIT', () =>
    withInbox({ handle: failingHandler }, async (failing) => {
      pool.reset();
      const outcome = await receiveOn(failing, 'rt-fail');
      expect(outcome.status).toBe(500);
      const sent = pool.reset();
      expect(sent).toHaveLength(3);
      expect(sent[0]).toMatch(/^begin .*; execute "wi:[^"]+\.try_claim".*; savepoint wi_apply$/);
      expect(sent[2]).toMatch(
        /^rollback to savepoint wi_apply; execute "wi:[^"]+"\(.*; execute "wi:[^"]+\.fail"\(.*; commit$/,
      );
      expect(await failing.event('rt-fail')).toMatchObject({ status: 'pending', attempts: 1 });
    }));

  it('a retry of a failed event: the try-claim finds its row waiting, and the claim follows with its SAVEPOINT (+1)', async () => {
    await withInbox({ handle: failingHandler }, async (failing) => {
      expect((await receiveOn(failing, 'rt-retry')).status).toBe(500);
    });
    pool.reset();
    expect((await deliver('rt-retry')).kind).toBe('processed');
    const sent = pool.reset();
    expect(sent).toHaveLength(4);
    expect(sent[0]).toMatch(/^begin .*; execute "wi:[^"]+\.try_claim".*; savepoint wi_apply$/);
    // The claim decides (it applies the waiting row), and a savepoint taken after it is what a
    // failed run would roll back to: the claim's locks stay.
    expect(sent[1]).toMatch(/^execute "wi:[^"]+\.claim"\('default', 'rt-retry', .*; savepoint wi_apply$/);
    expect(sent[3]).toMatch(/; commit$/);
    expect(await inbox.event('rt-retry')).toMatchObject({
      status: 'processed',
      attempts: 1,
      result: { ok: true },
    });
  });

  it('a held event: BEGIN with the claim, COMMIT', async () => {
    pool.reset();
    // A key of its own: seq 3 waits for 1, whatever the other tests did.
    expect((await deliver('rt-o3', { 'x-key': 'k-held', 'x-seq': '3' })).kind).toBe('held');
    expect(pool.reset()).toHaveLength(2);
  });

  it("held events drained in the gap-filler's transaction: each costs its handler's statements + 1 ([previous result + take_next + SAVEPOINT])", async () => {
    expect((await deliver('rt-d2', { 'x-key': 'kd', 'x-seq': '2' })).kind).toBe('held');
    expect((await deliver('rt-d3', { 'x-key': 'kd', 'x-seq': '3' })).kind).toBe('held');
    await inbox.idle();
    pool.reset();
    expect((await deliver('rt-d1', { 'x-key': 'kd', 'x-seq': '1' })).kind).toBe('processed');
    // Answered after COMMIT: the drained events' statements are already all sent.
    const sent = pool.reset();
    // The three handlers' statements + 2 + k (2 drained) = 7, in one transaction.
    expect(sent).toEqual([
      expect.stringMatching(
        /^begin isolation level read; execute "wi:[^"]+\.claim"\('default', 'rt-d1', .*; savepoint wi_apply$/,
      ),
      'select 1 as "one"',
      // The gap-filler's row with its result rides on the take of the next seq (which does not
      // wait: the claim holds the key row), and that event's savepoint follows it.
      expect.stringMatching(
        /^execute "wi:[^"]+\.record_applied"\('default', 'rt-d1', .*; execute "wi:[^"]+\.take_next"\('default', 'kd', .*; savepoint wi_apply$/,
      ),
      'select 1 as "one"',
      // The take locked the row and left it held; one UPDATE marks it processed with its
      // result (src/db/sql/mark-applied.ts).
      expect.stringMatching(
        /^execute "wi:[^"]+\.mark_applied"\('default', 'rt-d2', .*; execute "wi:[^"]+\.take_next"\('default', 'kd', .*; savepoint wi_apply$/,
      ),
      'select 1 as "one"',
      // take_next said no seq 4 waits: COMMIT, and no drain after the response.
      expect.stringMatching(/^execute "wi:[^"]+\.mark_applied"\('default', 'rt-d3', .*; commit$/),
    ]);
    await inbox.idle();
    expect(pool.reset()).toEqual([]);
    for (const [id, seq] of [
      ['rt-d2', 2],
      ['rt-d3', 3],
    ] as const) {
      expect(await inbox.event(id)).toMatchObject({
        status: 'processed',
        key: 'kd',
        seq,
        result: { ok: true },
      });
    }
  });

  it('deferred mode: the claim alone, its own READ COMMITTED transaction (no BEGIN, no COMMIT)', () =>
    // Acknowledges only (workers: 0): a worker's statements are not part of the delivery.
    withInbox({ source: 'rt-deferred', mode: 'deferred', workers: 0 }, async (deferred) => {
      const receive = (id: string, extra: Record<string, string> = {}) =>
        deferred.receive({
          headers: { 'idempotency-key': id, 'content-type': 'application/json', ...extra },
          rawBody: Buffer.from('{}'),
        });
      const alone = /^set transaction isolation level; execute "wi:[^"]+\.claim_many"\([^;]*$/;
      // The workers' count of pending events (`maxPending`), refreshed on a timer whatever the
      // deliveries, and the other instances' wake-up, one NOTIFY after commit per interval
      // whatever the deliveries (src/background/wake-ups.ts): not part of one.
      const sent = () =>
        pool
          .reset()
          .filter((text) => !text.startsWith('select count(*)::int as n') && !text.includes('pg_notify'));
      for (const [id, extra, kind] of [
        ['rtd-1', {}, 'pending'],
        ['rtd-1', {}, 'pending'], // a duplicate of a pending event
        ['rtd-o1', { 'x-key': 'kdf', 'x-seq': '1' }, 'pending'],
        ['rtd-o3', { 'x-key': 'kdf', 'x-seq': '3' }, 'held'],
      ] as const) {
        pool.reset();
        expect((await receive(id, extra)).kind).toBe(kind);
        expect(sent()).toEqual([expect.stringMatching(alone)]);
      }
      // Values of any size fold, as literals: the claim alone, one round trip.
      pool.reset();
      const big = await deferred.receive({
        headers: { 'idempotency-key': 'rtd-big', 'content-type': 'application/json' },
        rawBody: Buffer.from(JSON.stringify({ pad: 'x'.repeat(70_000) })),
      });
      expect(big.kind).toBe('pending');
      expect(sent()).toEqual([expect.stringMatching(alone)]);
      expect(await deferred.event('rtd-1')).toMatchObject({ status: 'pending' });
      expect(await deferred.event('rtd-o3')).toMatchObject({ status: 'held' });
    }));
});

// On PGlite the same folds save calls into the embedded database, each of which has a fixed
// cost of its own (src/db/drivers/pglite.ts): pinned the same way, counted as calls.
describe('calls into PGlite per delivery', () => {
  const calls: string[] = [];
  let pglite: PGlite;
  let counting: object;
  let inbox: Inbox;
  beforeAll(async () => {
    pglite = await freshPGlite();
    // Every call the driver makes into the embedded database, by its text.
    counting = {
      query: (text: string, params?: unknown[]) => {
        calls.push(text);
        return pglite.query(text, params);
      },
      exec: (text: string) => {
        calls.push(text);
        return pglite.exec(text);
      },
      close: () => pglite.close(),
      get closed() {
        return pglite.closed;
      },
    };
    inbox = createInbox({
      db: counting as any,
      sweepIntervalMs: 0,
      handle: async (_e, { tx }) => {
        await tx.selectNoFrom((eb) => eb.lit(1).as('one')).execute(); // the handler's own statement
        return { ok: true };
      },
    });
    await inbox.ready();
  });
  afterAll(async () => {
    await inbox.close();
    await pglite.close();
  });
  const deliver = (id: string) =>
    inbox.receive({
      headers: { 'idempotency-key': id, 'content-type': 'application/json' },
      rawBody: Buffer.from('{}'),
    });

  it('a new event: BEGIN with the try-claim and the SAVEPOINT, the handler, its row with the result and COMMIT', async () => {
    calls.length = 0;
    expect((await deliver('pgl-1')).kind).toBe('processed');
    // Before the session's first fold, one call PREPAREs the folded statements (once in its
    // life, not per delivery: the parse and plan of their text is not paid again).
    expect(calls.filter((text) => text.startsWith('prepare '))).toHaveLength(1);
    calls.length = 0;
    expect((await deliver('pgl-2')).kind).toBe('processed');
    expect(calls).toHaveLength(3);
    // One session: no try-lock, which could only answer true there (src/db/sql/try-claim.ts).
    expect(calls[0]).toMatch(
      /^begin isolation level read committed; execute "wi:[^"]+\.try_claim_one_session"\('default', 'pgl-2'\); savepoint wi_apply$/,
    );
    // The event's row, inserted with its result (src/db/sql/record-applied.ts), rides on COMMIT.
    expect(calls[2]).toMatch(
      /^execute "wi:[^"]+\.record_applied"\('default', 'pgl-2', .*'\{"ok":true\}'.*; commit$/,
    );
    expect(await inbox.event('pgl-1')).toMatchObject({ status: 'processed', result: { ok: true } });
  });

  it('a duplicate another instance processed: BEGIN with the try-claim, COMMIT', async () => {
    expect((await deliver('pgl-dup')).kind).toBe('processed');
    await using(createInbox({ db: counting as any, sweepIntervalMs: 0, handle: () => {} }), async (other) => {
      calls.length = 0;
      expect(await receiveOn(other, 'pgl-dup')).toMatchObject({
        kind: 'duplicate',
        body: { result: { ok: true } },
      });
      expect(calls).toHaveLength(2);
    });
  });

  it('deferred mode: the claim alone, one call', () =>
    using(
      createInbox({
        db: counting as any,
        source: 'pgl-deferred',
        mode: 'deferred',
        workers: 0,
        sweepIntervalMs: 0,
        handle: () => {},
      }),
      async (deferred) => {
        calls.length = 0;
        expect(await receiveOn(deferred, 'pgl-d1')).toMatchObject({ kind: 'pending' });
        // Without the workers' count of pending events, refreshed on a timer (not per delivery).
        expect(calls.filter((text) => !text.startsWith('select count(*)::int as n'))).toEqual([
          expect.stringMatching(
            /^set transaction isolation level read committed; execute "wi:[^"]+\.claim_many"\([^;]*$/,
          ),
        ]);
        expect(await deferred.event('pgl-d1')).toMatchObject({ status: 'pending' });
      },
    ));

  it('deferred mode: claims that arrive while the claim before them is sent go together, one call per batch', () =>
    using(
      createInbox({
        db: counting as any,
        source: 'pgl-batch',
        mode: 'deferred',
        workers: 0,
        sweepIntervalMs: 0,
        handle: () => {},
      }),
      async (deferred) => {
        calls.length = 0;
        // Ten at once on one session: the first finds it free and goes alone; the nine that
        // arrive meanwhile wait for it and go as one statement.
        const ids = Array.from({ length: 10 }, (_, i) => `pgl-batch-${i}`);
        const answers = await Promise.all(ids.map((id) => receiveOn(deferred, id)));
        expect(answers.map((a) => a.kind)).toEqual(ids.map(() => 'pending'));
        const claims = calls.filter((text) => !text.startsWith('select count(*)::int as n'));
        expect(claims).toHaveLength(2);
        const idsIn = (text: string) => ids.filter((id) => text.includes(`"${id}"`));
        expect(claims.map(idsIn)).toEqual([ids.slice(0, 1), ids.slice(1)]);
        for (const id of ids) expect(await deferred.event(id)).toMatchObject({ status: 'pending' });
      },
    ));

  it('its statements deallocated behind its back: the next delivery is processed, folded as text from then on', async () => {
    await pglite.exec('deallocate all');
    calls.length = 0;
    expect((await deliver('pgl-dealloc')).kind).toBe('processed');
    // The EXECUTE failed and was rolled back; the same fold went again as text.
    expect(calls).toEqual([
      expect.stringMatching(/^begin .*; execute "wi:[^"]+\.try_claim_one_session"/),
      'rollback',
      expect.stringMatching(
        /^begin .*; select true as locked, \(extract\(epoch from coalesce\(e.received_at, now\(\)\)\) \* 1000\)::float8 as received_ms,/s,
      ),
      expect.stringMatching(/^select 1/),
      expect.stringMatching(/^insert into .*"events" .*; commit$/s),
    ]);
    expect(await inbox.event('pgl-dealloc')).toMatchObject({ status: 'processed', result: { ok: true } });
  });
});

// Deferred mode's workers (src/receive/pipeline.ts states the count): unordered events taken
// n at a time cost the handlers' statements + n + 1 in all, never more per event than inline.
describe.runIf(postgresTarget)('round trips of a worker applying a batch of pending events', () => {
  let t: TargetDb;
  let pool: CountingPool;
  let acker: Inbox;
  let worker: Inbox;
  let gateEntered: () => void = () => {};
  let releaseGate: () => void = () => {};
  const failing = new Set<string>();
  beforeAll(async () => {
    t = await postgresTarget!.open();
    pool = new CountingPool(postgresUrl!);
    // Acknowledges only (workers: 0), on a pool of its own: its statements are not counted.
    acker = createInbox({
      db: t.db,
      schema: t.schema,
      mode: 'deferred',
      workers: 0,
      sweepIntervalMs: 0,
      handle: () => {},
    });
    await acker.ready();
    // One lane, so it takes whole batches; woken by NOTIFY, never by a poll (which would be
    // counted). Inline mode with workers: no pending count is refreshed on the counted pool.
    worker = createInbox({
      db: pool,
      schema: t.schema,
      workers: 1,
      workerBatchSize: 3,
      pollIntervalMs: 3_600_000,
      sweepIntervalMs: 0,
      // A failed event waits (its retry is not part of the batch counted here).
      retryBaseMs: 60_000,
      retryCapMs: 60_000,
      handle: async (e, { tx }) => {
        if (e.id.startsWith('gate')) {
          const released = new Promise<void>((resolve) => (releaseGate = resolve));
          gateEntered();
          await released;
        }
        await tx.selectNoFrom((eb) => eb.lit(1).as('one')).execute(); // the handler's own statement
        if (failing.has(e.id)) throw new Error('no');
        return { ok: true };
      },
    });
    await worker.ready();
    await worker.idle();
  });
  afterAll(async () => {
    await worker.close();
    await acker.close();
    await pool.end();
    await t.close();
  });
  const ack = async (id: string) =>
    expect(
      (
        await acker.receive({
          headers: { 'idempotency-key': id, 'content-type': 'application/json' },
          rawBody: Buffer.from('{}'),
        })
      ).status,
    ).toBe(202);

  /**
   * The worker's lane is held in the handler of a first event (`gate…`) while three more are
   * acknowledged; released, it takes the three in one batch. Returns the batch's round trips.
   */
  async function batchOfThree(ids: string[]): Promise<string[]> {
    const entered = new Promise<void>((resolve) => (gateEntered = resolve));
    await ack(`gate-${ids[0]}`);
    await entered;
    for (const id of ids) await ack(id);
    pool.reset();
    releaseGate();
    await worker.idle();
    const sent = pool.reset();
    // The gate event's handler finishes first (taken alone by take_pending, locked and left
    // pending: its mark, with its result, rides on COMMIT); after the batch, at most a take
    // that found nothing (for a NOTIFY that came late).
    expect(sent.slice(0, 2)).toEqual([
      'select 1 as "one"',
      expect.stringMatching(/^execute "wi:[^"]+\.mark_applied"\('default', 'gate-.*; commit$/),
    ]);
    return sent.slice(2, 9);
  }

  it('one event: [BEGIN + take_pending + SAVEPOINT], the handler, [its mark with the result + COMMIT]', async () => {
    const entered = new Promise<void>((resolve) => (gateEntered = resolve));
    pool.reset();
    await ack('gate-single');
    await entered;
    releaseGate();
    await worker.idle();
    const sent = pool.reset();
    // Before it, at most the lane's first LISTEN and a take that found nothing; after it, at
    // most a take that found nothing (for a NOTIFY that came late).
    const start = sent.indexOf('select 1 as "one"') - 1;
    expect(start).toBeLessThanOrEqual(3);
    expect(sent.slice(start, start + 3)).toEqual([
      expect.stringMatching(
        /^begin isolation level read; execute "wi:[^"]+\.take_pending"\(.*; savepoint wi_apply$/,
      ),
      'select 1 as "one"',
      expect.stringMatching(/^execute "wi:[^"]+\.mark_applied"\('default', 'gate-single', .*; commit$/),
    ]);
    expect(sent.length).toBeLessThanOrEqual(start + 5); // + that take and its COMMIT
    expect(await worker.event('gate-single')).toMatchObject({
      status: 'processed',
      result: { ok: true },
      payload: null,
    });
  });

  it('three events: [BEGIN + take + SAVEPOINT], then each handler and [its mark with the result + the next SAVEPOINT]; the last mark with COMMIT', async () => {
    const batch = await batchOfThree(['rtb-1', 'rtb-2', 'rtb-3']);
    // 3 × (the handler's 1 + 1) + 1 = 7: per event the handler's + 1 + 1/3.
    expect(batch).toEqual([
      expect.stringMatching(
        /^begin isolation level read; execute "wi:[^"]+\.take_pending"\(.*; savepoint wi_apply$/,
      ),
      'select 1 as "one"',
      expect.stringMatching(/^execute "wi:[^"]+\.mark_applied"\(.*; savepoint wi_apply$/),
      'select 1 as "one"',
      expect.stringMatching(/^execute "wi:[^"]+\.mark_applied"\(.*; savepoint wi_apply$/),
      'select 1 as "one"',
      expect.stringMatching(/^execute "wi:[^"]+\.mark_applied"\(.*; commit$/),
    ]);
    for (const id of ['rtb-1', 'rtb-2', 'rtb-3'])
      expect(await worker.event(id)).toMatchObject({ status: 'processed', result: { ok: true } });
  });

  it('a handler that throws in the middle: its failure rides on the next SAVEPOINT, at the same count', async () => {
    failing.add('rtf-2');
    let batch: string[];
    try {
      batch = await batchOfThree(['rtf-1', 'rtf-2', 'rtf-3']);
    } finally {
      failing.delete('rtf-2');
    }
    expect(batch).toEqual([
      expect.stringMatching(/^begin .*; execute "wi:[^"]+\.take_pending"\(.*; savepoint wi_apply$/),
      'select 1 as "one"',
      expect.stringMatching(/^execute "wi:[^"]+\.mark_applied"\(.*; savepoint wi_apply$/),
      'select 1 as "one"',
      expect.stringMatching(
        /^rollback to savepoint wi_apply; execute "wi:[^"]+"\(.*; execute "wi:[^"]+\.fail"\(.*; savepoint wi_apply$/,
      ),
      'select 1 as "one"',
      expect.stringMatching(/^execute "wi:[^"]+\.mark_applied"\(.*; commit$/),
    ]);
    expect(await worker.event('rtf-1')).toMatchObject({ status: 'processed' });
    expect(await worker.event('rtf-2')).toMatchObject({ status: 'pending', attempts: 1 });
    expect(await worker.event('rtf-3')).toMatchObject({ status: 'processed' });
  });
});
