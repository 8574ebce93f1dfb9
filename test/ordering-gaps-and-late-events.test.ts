/**
 * Per-key ordering, one instance: held events (202), drains, gap timeouts (skip and block),
 * late events, old duplicates, id reuse, the reorder buffer's bounds, `firstSeq`, and the
 * inspection API. Every case checks the ledger: what was applied, in which order, how often.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Inbox } from '../src/index.js';
import { type TargetDb, targets } from './support/databases.js';
import { invariantsHoldAfterEach } from './support/invariants.js';
import { type LedgerInbox, ledgerInbox, ordered, range } from './support/ordering.js';

/** Opening PGlite and migrating can take a minute when the 2-core box is busy. */
const SETUP = 180_000;

let n = 0;
/** A key no other test uses (every test shares the target's schemas). */
const newKey = (label: string) => `${label}-${++n}`;

/** Makes the key's waiting events look `ms` older, so a gap timeout is due without waiting. */
async function age(inbox: Inbox, key: string, ms: number): Promise<void> {
  const db = await inbox.kysely();
  await sql`update ${sql.table(`${inbox.tables.schema}.events`)}
    set received_at = received_at - make_interval(secs => ${ms / 1000})
    where key = ${key} and status in ('held', 'pending')`.execute(db);
}

async function gaps(inbox: Inbox, key: string) {
  const db = await inbox.kysely();
  const rows = await db
    .withSchema(inbox.tables.schema)
    .selectFrom('gaps')
    .select(['from_seq', 'to_seq', 'reason'])
    .where('key', '=', key)
    .orderBy('from_seq')
    .execute();
  return rows.map((r) => ({ from: Number(r.from_seq), to: Number(r.to_seq), reason: r.reason }));
}

async function eventRows(inbox: Inbox, key: string) {
  const db = await inbox.kysely();
  const rows = await db
    .withSchema(inbox.tables.schema)
    .selectFrom('events')
    .select(['id', 'seq', 'status'])
    .where('key', '=', key)
    .orderBy('seq')
    .orderBy('id')
    .execute();
  return rows.map((r) => ({ id: r.id, seq: Number(r.seq), status: r.status }));
}

invariantsHoldAfterEach();

describe.each(targets)('per-key ordering on $name', (target) => {
  let t: TargetDb;
  let app: LedgerInbox;
  // A second inbox on the same tables with other options (a different source, so no clash).
  const closers: Inbox[] = [];

  beforeAll(async () => {
    t = await target.open();
    // These cases are about what Postgres decides (the cursor as the dedup record, late
    // events): the in-process LRU of processed events would answer some duplicates first.
    app = await ledgerInbox(t, { gapTimeoutMs: 60_000, duplicateCacheSize: 0 });
  }, SETUP);
  afterAll(async () => {
    for (const inbox of closers) await inbox.close();
    await app?.inbox.close();
    await t?.close();
  });

  /** Another inbox on the same database and ledger, with its own source and options. */
  async function variant(
    options: Parameters<typeof ledgerInbox>[1],
    wrap?: Parameters<typeof ledgerInbox>[2],
  ): Promise<LedgerInbox> {
    // PGlite is one session: inboxes on it must not run transactions at once, and these don't
    // (each test awaits every call).
    const v = await ledgerInbox(t, { source: `variant-${++n}`, ...options }, wrap);
    closers.push(v.inbox);
    return v;
  }

  it('holds an event ahead of its key with 202, stores it once, and answers a repeat with 202 again', async () => {
    const key = newKey('held');
    const [first, again] = await app.send(ordered(key, 2), ordered(key, 2));
    for (const outcome of [first, again]) {
      expect(outcome.status).toBe(202);
      expect(outcome.body).toEqual({ status: 'held', id: `${key}:2`, key, seq: 2, expected: 1 });
    }
    expect(await eventRows(app.inbox, key)).toEqual([{ id: `${key}:2`, seq: 2, status: 'held' }]);
    expect(await app.seqs(key)).toEqual([]);
    // The payload and headers are kept: the event is applied later without the sender.
    const [held] = await app.inbox.held(key);
    expect(JSON.parse(held.payload!.toString())).toEqual({ amount: 2 });
    expect(held.headers).toMatchObject({ 'x-key': key, 'x-seq': '2', 'content-type': 'application/json' });
  });

  it('drains the held events in seq order right after the gap-filling delivery', async () => {
    const key = newKey('drain');
    const outcomes = await app.send(ordered(key, 4), ordered(key, 2), ordered(key, 3));
    expect(outcomes.map((o) => o.status)).toEqual([202, 202, 202]);
    const [fill] = await app.send(ordered(key, 1));
    expect(fill.status).toBe(200);
    expect(fill.body).toEqual({ status: 'processed', id: `${key}:1`, result: { balance: 1 } });
    await app.inbox.idle();
    expect(await app.seqs(key)).toEqual([1, 2, 3, 4]);
    expect(await app.balance(key)).toBe(10);
    expect(await app.inbox.held(key)).toEqual([]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 5, state: 'open', heldSeqs: [] });
    // Duplicates of drained events replay their result and change nothing.
    const [dup] = await app.send(ordered(key, 3));
    expect(dup.status).toBe(200);
    expect(dup.headers['idempotent-replayed']).toBe('true');
    expect(dup.body).toEqual({ status: 'duplicate', id: `${key}:3`, result: { balance: 6 } });
    expect(await app.seqs(key)).toEqual([1, 2, 3, 4]);
  });

  it('skips a gap that outlived gapTimeoutMs, applies what was held, and dead-letters the late event', async () => {
    const key = newKey('skip');
    await app.send(ordered(key, 4), ordered(key, 3), ordered(key, 6));
    // Not yet timed out: the sweeper leaves the key alone.
    expect(await app.inbox.sweep()).toEqual({
      drained: 0,
      gapsSkipped: 0,
      keysBlocked: 0,
      applied: 0,
      pruned: 0,
      purged: 0,
      keyErrors: 0,
    });
    expect(await app.seqs(key)).toEqual([]);

    await age(app.inbox, key, 61_000);
    // Both gaps timed out (6 waited as long as 3 and 4): one pass settles both, the second once
    // the drain reaches it, not a pass later.
    const report = await app.inbox.sweep();
    expect(report).toMatchObject({ gapsSkipped: 2, keysBlocked: 0, drained: 3 });
    expect(await app.seqs(key)).toEqual([3, 4, 6]);
    expect(await gaps(app.inbox, key)).toEqual([
      { from: 1, to: 2, reason: 'timeout' },
      { from: 5, to: 5, reason: 'timeout' },
    ]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 7, heldSeqs: [] });

    // Seq 2 arrives after its gap was skipped: applying it now would break the order.
    const [late, lateAgain] = await app.send(ordered(key, 2), ordered(key, 2));
    for (const outcome of [late, lateAgain]) {
      expect(outcome.status).toBe(200);
      expect(outcome.body).toEqual({ status: 'dead-lettered', id: `${key}:2`, reason: 'late' });
    }
    expect(await app.seqs(key)).toEqual([3, 4, 6]);
    const dead = await app.inbox.deadLetters({ key });
    expect(dead.map((e) => [e.id, e.seq, e.status, e.deadReason])).toEqual([[`${key}:2`, 2, 'dead', 'late']]);
    expect(JSON.parse(dead[0].payload!.toString())).toEqual({ amount: 2 });

    // The key goes on: 7 is next.
    await app.send(ordered(key, 7));
    await app.inbox.idle();
    expect(await app.seqs(key)).toEqual([3, 4, 6, 7]);
  });

  it("deferred mode: a pass's report counts the gaps its drains settled too", async () => {
    // No lanes: the pass drains the key itself, the workers' way (take_turn, then advance,
    // which settles the second gap as the drain reaches it).
    const v = await variant({ gapTimeoutMs: 60_000, mode: 'deferred', workers: 0, sweepIntervalMs: 0 });
    const key = newKey('deferred-skip');
    const outcomes = await v.send(ordered(key, 4), ordered(key, 3), ordered(key, 6));
    expect(outcomes.map((o) => o.status)).toEqual([202, 202, 202]);
    await age(v.inbox, key, 61_000);
    expect(await v.inbox.sweep()).toMatchObject({ gapsSkipped: 2, keysBlocked: 0, drained: 3 });
    expect(await v.seqs(key)).toEqual([3, 4, 6]);
    expect(await gaps(v.inbox, key)).toEqual([
      { from: 1, to: 2, reason: 'timeout' },
      { from: 5, to: 5, reason: 'timeout' },
    ]);
  });

  it('a gap is not settled before the events behind it waited gapTimeoutMs', async () => {
    const key = newKey('young-gap');
    await app.send(ordered(key, 3), ordered(key, 4));
    await age(app.inbox, key, 61_000);
    // 6 arrives now: the gap before it (5) has young events behind it only.
    await app.send(ordered(key, 6));
    expect(await app.inbox.sweep()).toMatchObject({ gapsSkipped: 1, drained: 2 });
    expect(await app.seqs(key)).toEqual([3, 4]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 5, heldSeqs: [6] });
    // 5 arrives in time and is applied, 6 after it.
    await app.send(ordered(key, 5));
    await app.inbox.idle();
    expect(await app.seqs(key)).toEqual([3, 4, 5, 6]);
  });

  it('skips a gap after a real gapTimeoutMs has passed', async () => {
    const v = await variant({ gapTimeoutMs: 1 });
    const key = newKey('real-timeout');
    await v.send(ordered(key, 2));
    // The timeout is 1 ms of Postgres time; a sweep that comes too early finds nothing due.
    let report = await v.inbox.sweep();
    while (report.gapsSkipped === 0) report = await v.inbox.sweep();
    expect(report).toMatchObject({ gapsSkipped: 1, drained: 1 });
    expect(await v.seqs(key)).toEqual([2]);
  });

  it('blocks the key on gap timeout with onGapTimeout "block", until the missing event arrives', async () => {
    const v = await variant({ gapTimeoutMs: 60_000, onGapTimeout: 'block' });
    const key = newKey('block');
    await v.send(ordered(key, 3));
    await age(v.inbox, key, 61_000);
    expect(await v.inbox.sweep()).toEqual({
      drained: 0,
      gapsSkipped: 0,
      keysBlocked: 1,
      applied: 0,
      pruned: 0,
      purged: 0,
      keyErrors: 0,
    });
    expect(await v.inbox.keyState(key)).toMatchObject({
      nextSeq: 1,
      state: 'blocked',
      blockedSeq: 1,
      blockedReason: 'gap',
      heldSeqs: [3],
    });
    // Blocked stays blocked: no later pass skips the gap, nothing is applied.
    expect(await v.inbox.sweep()).toEqual({
      drained: 0,
      gapsSkipped: 0,
      keysBlocked: 0,
      applied: 0,
      pruned: 0,
      purged: 0,
      keyErrors: 0,
    });
    expect(await gaps(v.inbox, key)).toEqual([]);
    expect((await v.send(ordered(key, 2)))[0].status).toBe(202);
    expect(await v.seqs(key)).toEqual([]);

    // The missing event unblocks the key and everything held applies, in order.
    const [fill] = await v.send(ordered(key, 1));
    expect(fill.status).toBe(200);
    await v.inbox.idle();
    expect(await v.seqs(key)).toEqual([1, 2, 3]);
    expect(await v.inbox.keyState(key)).toMatchObject({ nextSeq: 4, state: 'open', blockedSeq: null });
  });

  it('keeps sweeping open keys when more keys than one pass takes are blocked', async () => {
    const v = await variant({ gapTimeoutMs: 60_000, onGapTimeout: 'block' });
    const source = v.inbox.options.source;
    const db = await v.inbox.kysely();
    // 600 keys blocked by an operator-facing gap long ago (more than one sweeper pass reads),
    // each holding an event older than anything else.
    const s = t.schema;
    await sql`insert into ${sql.table(`${s}.keys`)} (source, key, next_seq, state, blocked_seq, blocked_reason, stream)
      select ${source}, 'blocked-' || i, 1, 'blocked', 1, 'gap', 'blocked-' || i from generate_series(1, 600) i`.execute(
      db,
    );
    await sql`insert into ${sql.table(`${s}.events`)} (source, id, key, seq, body_hash, status, payload, headers, received_at, stream)
      select ${source}, 'blocked-' || i || ':2', 'blocked-' || i, 2, 'h', 'held', '\\x7b7d'::bytea, '{}'::jsonb,
             now() - interval '1 day', 'blocked-' || i
        from generate_series(1, 600) i`.execute(db);
    const key = newKey('starved');
    await v.send(ordered(key, 2));
    await age(v.inbox, key, 61_000);
    expect(await v.inbox.sweep()).toMatchObject({ keysBlocked: 1 });
    expect(await v.inbox.keyState(key)).toMatchObject({ state: 'blocked', blockedSeq: 1 });
  });

  it('counts failed runs of a held event and dead-letters it as poison after maxAttempts, blocking its key', async () => {
    const key = newKey('poison');
    const poison = `${key}:2`;
    let runs = 0;
    const v = await variant(
      { maxAttempts: 3, retryBaseMs: 1, retryCapMs: 1 },
      (handle) => (event, context) => {
        if (event.id === poison) {
          runs++;
          throw new Error('this event cannot be applied');
        }
        return handle(event, context);
      },
    );
    await v.send(ordered(key, 2), ordered(key, 3), ordered(key, 1));
    await v.inbox.idle(); // the drain's run of seq 2 failed: attempt 1
    expect(await v.inbox.held(key)).toMatchObject([
      { seq: 2, attempts: 1 },
      { seq: 3, attempts: 0 },
    ]);
    // The sweeper retries it (retryCapMs 1: no backoff to wait for) until maxAttempts.
    expect(await v.inbox.sweep()).toMatchObject({ drained: 0 });
    expect(await v.inbox.sweep()).toMatchObject({ drained: 0 });
    expect(runs).toBe(3);
    const [dead] = await v.inbox.deadLetters({ key });
    expect(dead).toMatchObject({ id: poison, seq: 2, deadReason: 'poison', attempts: 3 });
    expect(dead.lastError).toContain('this event cannot be applied');
    expect(await v.inbox.keyState(key)).toMatchObject({
      nextSeq: 2,
      state: 'blocked',
      blockedSeq: 2,
      blockedReason: 'poison',
      heldSeqs: [3],
    });
    // Blocked: no more runs, and nothing after it is applied out of order.
    await v.inbox.sweep();
    expect(runs).toBe(3);
    expect(await v.seqs(key)).toEqual([1]);
  });

  it('answers an old duplicate whose row was pruned with 200 and no side effect', async () => {
    // No in-process duplicate cache: the answer must come from the key's cursor in Postgres.
    const v = await variant({ duplicateCacheSize: 0 });
    const key = newKey('pruned');
    await v.send(ordered(key, 1), ordered(key, 2));
    const db = await v.inbox.kysely();
    await db.withSchema(t.schema).deleteFrom('events').where('key', '=', key).where('seq', '=', 1).execute();
    const [old] = await v.send(ordered(key, 1));
    expect(old.status).toBe(200);
    expect(old.body).toEqual({ status: 'duplicate', id: `${key}:1`, result: null });
    expect(await v.seqs(key)).toEqual([1, 2]);
    expect(await v.balance(key)).toBe(3);
    expect(await v.inbox.deadLetters({ key })).toEqual([]);
    expect(await eventRows(v.inbox, key)).toEqual([{ id: `${key}:2`, seq: 2, status: 'processed' }]);
  });

  it('refuses an id reused with another seq or another key with 422, applying nothing', async () => {
    const key = newKey('reuse');
    const other = newKey('reuse-other');
    const id = `${key}-the-id`;
    await app.send(ordered(key, 1, 1, id));
    const [otherSeq, otherKey] = await app.send(ordered(key, 2, 1, id), ordered(other, 1, 1, id));
    expect(otherSeq.status).toBe(422);
    expect(otherSeq.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(otherSeq.body).toMatchObject({ status: 422, field: 'x-seq' });
    expect(otherKey.status).toBe(422);
    expect(otherKey.body).toMatchObject({ status: 422, field: 'x-key' });
    expect(await app.seqs(key)).toEqual([1]);
    expect(await app.seqs(other)).toEqual([]);
    // The refused delivery left no cursor behind for the key it named.
    expect(await app.inbox.keyState(other)).toBeUndefined();
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 2 });
  });

  it('refuses a second event id for a seq that is already held with 422', async () => {
    const key = newKey('seq-taken');
    await app.send(ordered(key, 2));
    const [clash] = await app.send(ordered(key, 2, 2, `${key}:2-again`));
    expect(clash.status).toBe(422);
    expect(clash.body).toMatchObject({ status: 422, field: 'x-seq' });
    await app.send(ordered(key, 1));
    await app.inbox.idle();
    expect(await app.seqs(key)).toEqual([1, 2]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 3, heldSeqs: [] });
  });

  it('answers 429 with Retry-After past maxHeldPerKey and maxSeqAhead, and stores nothing', async () => {
    const v = await variant({ maxHeldPerKey: 2, maxSeqAhead: 3, gapTimeoutMs: 7000 });
    const key = newKey('bounds');
    const [h2, h3, full] = await v.send(ordered(key, 2), ordered(key, 3), ordered(key, 4));
    expect([h2.status, h3.status]).toEqual([202, 202]);
    expect(full.status).toBe(429);
    expect(full.headers['retry-after']).toBe('7');
    expect(full.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(full.body).toMatchObject({ status: 429, expected: 1, field: 'x-key' });
    expect(await eventRows(v.inbox, key)).toEqual([
      { id: `${key}:2`, seq: 2, status: 'held' },
      { id: `${key}:3`, seq: 3, status: 'held' },
    ]);
    // A repeat of a held event is not a new one: still 202.
    expect((await v.send(ordered(key, 3)))[0].status).toBe(202);

    const ahead = newKey('ahead');
    const [tooFar] = await v.send(ordered(ahead, 5));
    expect(tooFar.status).toBe(429);
    expect(tooFar.headers['retry-after']).toBe('7');
    expect(tooFar.body).toMatchObject({ status: 429, expected: 1, field: 'x-seq' });
    expect(await eventRows(v.inbox, ahead)).toEqual([]);
    expect(await v.inbox.keyState(ahead)).toBeUndefined();
    const [justInside] = await v.send(ordered(ahead, 4));
    expect(justInside.status).toBe(202);

    // Once the key moves, the same deliveries fit.
    await v.send(ordered(key, 1));
    await v.inbox.idle();
    expect((await v.send(ordered(key, 4)))[0].status).toBe(200);
    expect(await v.seqs(key)).toEqual([1, 2, 3, 4]);
  });

  it('with firstSeq "first-seen", starts a new key at the first seq it sees', async () => {
    const v = await variant({ firstSeq: 'first-seen' });
    const key = newKey('first-seen');
    const [first, ahead] = await v.send(ordered(key, 5), ordered(key, 7));
    expect(first.status).toBe(200);
    expect(ahead.body).toEqual({ status: 'held', id: `${key}:7`, key, seq: 7, expected: 6 });
    await v.send(ordered(key, 6));
    await v.inbox.idle();
    expect(await v.seqs(key)).toEqual([5, 6, 7]);
    // Before the first seen seq: from before this consumer joined the stream.
    const [before] = await v.send(ordered(key, 3));
    expect(before.status).toBe(200);
    expect(await v.seqs(key)).toEqual([5, 6, 7]);

    // With the default (firstSeq 1) the same first delivery is held.
    const strict = newKey('first-one');
    expect((await app.send(ordered(strict, 5)))[0].body).toMatchObject({ status: 'held', expected: 1 });
  });

  it('inspection: keyState, held and deadLetters show the cursor, the buffer and the dead letters', async () => {
    const key = newKey('inspect');
    expect(await app.inbox.keyState(key)).toBeUndefined();
    await app.send(ordered(key, 1), ordered(key, 5), ordered(key, 3));
    const state = await app.inbox.keyState(key);
    expect(state).toMatchObject({
      key,
      nextSeq: 2,
      state: 'open',
      blockedSeq: null,
      blockedReason: null,
      heldSeqs: [3, 5],
    });
    expect(state!.oldestHeldAgeMs).toBeGreaterThanOrEqual(0);
    expect(state!.updatedAt).toBeInstanceOf(Date);

    const held = await app.inbox.held(key);
    expect(held.map((e) => [e.id, e.seq, e.status, e.attempts])).toEqual([
      [`${key}:3`, 3, 'held', 0],
      [`${key}:5`, 5, 'held', 0],
    ]);
    expect(held.every((e) => e.receivedAt instanceof Date && e.processedAt === null)).toBe(true);
    // held() without a key lists every key's held events.
    expect((await app.inbox.held()).filter((e) => e.key === key)).toHaveLength(2);

    await age(app.inbox, key, 61_000);
    expect((await app.inbox.keyState(key))!.oldestHeldAgeMs).toBeGreaterThanOrEqual(61_000);
    // Skips 2, applies 3, then skips 4 (5 waited past the timeout too) and applies 5.
    await app.inbox.sweep();
    expect(await app.seqs(key)).toEqual([1, 3, 5]);
    await app.send(ordered(key, 2), ordered(key, 4), ordered(key, 6));
    await app.inbox.idle();
    expect(await app.seqs(key)).toEqual([1, 3, 5, 6]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 7, heldSeqs: [], oldestHeldAgeMs: null });
    const dead = await app.inbox.deadLetters();
    expect(dead.filter((e) => e.key === key).map((e) => [e.seq, e.deadReason])).toEqual([
      [2, 'late'],
      [4, 'late'],
    ]);
    expect(await app.inbox.deadLetters({ key: newKey('nothing') })).toEqual([]);
  });

  it('keeps keys independent: a gap in one key holds nothing of another', async () => {
    const a = newKey('indep-a');
    const b = newKey('indep-b');
    await app.send(ordered(a, 2), ordered(b, 1), ordered(b, 2), ordered(a, 3));
    expect(await app.seqs(a)).toEqual([]);
    expect(await app.seqs(b)).toEqual([1, 2]);
    await app.send(ordered(a, 1));
    await app.inbox.idle();
    expect(await app.seqs(a)).toEqual(range(1, 3));
  });
});
