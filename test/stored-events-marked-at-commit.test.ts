/**
 * A stored event applied later (a drain's take_next, a deferred worker's take_pending or
 * take_turn) is locked by its take but marked processed only at COMMIT, with its result, in
 * one UPDATE (src/db/sql/mark-applied.ts). What an operator sees afterwards must be what the
 * take's own mark left: processed, with its result, without its payload and headers (kept
 * with `keepPayload`); a failed run leaves it waiting with its payload, counted. The take
 * itself leaves the row waiting: the caller's mark is what makes it processed.
 */
import { type Kysely, sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { createInbox, type Inbox, type InboxEvent } from '../src/index.js';
import { type Target, type TargetDb, targets } from './support/databases.js';
import { perTestSchemas } from './support/per-test-schemas.js';

let n = 0;
const uid = (label: string) => `${label}-${process.pid}-${++n}`;
const body = (id: string) => Buffer.from(JSON.stringify({ id }));

describe.each(targets)('stored events marked processed at COMMIT, on $name', (target: Target) => {
  // One database per target, a fresh schema per test: added first, so its drop runs after
  // the test's inboxes are closed (hooks after a test run in the reverse of their order).
  const database = perTestSchemas(target);
  const opened: Array<{ close(): Promise<void> }> = [];
  afterEach(async () => {
    for (const o of opened.splice(0).reverse()) await o.close();
  });

  async function open(): Promise<TargetDb> {
    return database();
  }

  /** An inbox whose handler returns `{ applied: id }`, throws for ids in `failing`, and reports each run. */
  function inboxOn(t: TargetDb, options: Record<string, unknown>, failing = new Set<string>()) {
    const runs: Array<{ id: string; ok: boolean }> = [];
    const waiters = new Map<string, () => void>();
    const inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      retryBaseMs: 3_600_000,
      retryCapMs: 3_600_000,
      ...options,
      handle: async (event: InboxEvent) => {
        const ok = !failing.has(event.id);
        runs.push({ id: event.id, ok });
        waiters.get(event.id)?.();
        if (!ok) throw new Error('no');
        return event.id.startsWith('none') ? undefined : { applied: event.id };
      },
    });
    opened.push(inbox);
    /** Resolves once `id`'s handler ran and the run that ran it is over. */
    const ran = async (id: string) => {
      if (!runs.some((r) => r.id === id)) await new Promise<void>((resolve) => waiters.set(id, resolve));
      await inbox.idle();
    };
    return { inbox, runs, ran };
  }

  const deliver = (inbox: Inbox, id: string, key?: string, seq?: number) =>
    inbox.receive({
      headers: {
        'idempotency-key': id,
        'content-type': 'application/json',
        ...(key ? { 'x-key': key, 'x-seq': String(seq) } : {}),
      },
      rawBody: body(id),
    });

  for (const keepPayload of [false, true]) {
    const payload = (id: string) => (keepPayload ? body(id) : null);

    it(`a drained event ends processed with its result${keepPayload ? ', its payload kept (keepPayload)' : ', without its payload'}`, async () => {
      const t = await open();
      const { inbox, ran } = inboxOn(t, { keepPayload });
      const key = uid('k');
      const [first, second] = [uid('d1'), uid('d2')];
      expect((await deliver(inbox, second, key, 2)).kind).toBe('held');
      expect((await deliver(inbox, first, key, 1)).kind).toBe('processed');
      await ran(second);
      const drained = await inbox.event(second);
      expect(drained).toMatchObject({
        status: 'processed',
        key,
        seq: 2,
        result: { applied: second },
        attempts: 0,
      });
      expect(drained?.payload).toEqual(payload(second));
      expect(drained?.processedAt).toBeInstanceOf(Date);
    });

    it(`a worker-applied event (take_pending, take_turn) ends processed with its result${keepPayload ? ', its payload kept' : ', without its payload'}`, async () => {
      const t = await open();
      const { inbox, ran } = inboxOn(t, { keepPayload, mode: 'deferred', workers: 1, pollIntervalMs: 50 });
      const [unordered, ordered, key] = [uid('w'), uid('wo'), uid('k')];
      expect((await deliver(inbox, unordered)).status).toBe(202);
      expect((await deliver(inbox, ordered, key, 1)).status).toBe(202);
      await ran(unordered);
      await ran(ordered);
      for (const id of [unordered, ordered]) {
        const e = await inbox.event(id);
        expect(e).toMatchObject({ status: 'processed', result: { applied: id }, attempts: 0 });
        expect(e?.payload).toEqual(payload(id));
      }
    });
  }

  it('a handler returning nothing: processed, result null; a failed run: waiting, counted, its payload kept', async () => {
    const t = await open();
    const [none, bad, key] = [uid('none'), uid('bad'), uid('k')];
    const { inbox, ran } = inboxOn(t, { mode: 'deferred', workers: 1, pollIntervalMs: 50 }, new Set([bad]));
    expect((await deliver(inbox, none)).status).toBe(202);
    expect((await deliver(inbox, bad, key, 1)).status).toBe(202);
    await ran(none);
    await ran(bad);
    expect(await inbox.event(none)).toMatchObject({ status: 'processed', result: null });
    const failed = await inbox.event(bad);
    // An ordered event waits as `held` after a failed run, as when the take marked it.
    expect(failed).toMatchObject({ status: 'held', attempts: 1, result: null, processedAt: null });
    expect(failed?.lastError).toMatch(/no/);
    expect(failed?.payload).toEqual(body(bad));
    const db = await inbox.kysely();
    const { rows } = await sql<{ next_seq: string | number }>`
      select next_seq from ${sql.raw(inbox.tables.keys)} where key = ${key}`.execute(db);
    expect(Number(rows[0]?.next_seq)).toBe(1);
  });

  describe('a take', () => {
    /** Stores events as pending (deferred mode, no worker), then calls a take. */
    async function stored(t: TargetDb) {
      const inbox = createInbox({
        db: t.db,
        schema: t.schema,
        sweepIntervalMs: 0,
        mode: 'deferred',
        workers: 0,
        handle: () => {},
      });
      opened.push(inbox);
      await inbox.ready();
      return inbox;
    }
    const takeIn = async (db: Kysely<any>, text: string) =>
      db.transaction().execute(async (tx) => (await sql.raw<{ id: string }>(text).execute(tx)).rows);

    it("leaves the row waiting: the caller's mark is what makes it processed", async () => {
      const t = await open();
      const inbox = await stored(t);
      const db = await inbox.kysely();
      const id = uid('u');
      expect((await deliver(inbox, id)).status).toBe(202);
      expect(await takeIn(db, `select id from ${inbox.tables.fn('take_pending')}('default', 5)`)).toEqual([
        { id },
      ]);
      const e = await inbox.event(id);
      expect(e).toMatchObject({ status: 'pending', processedAt: null });
      expect(e?.payload).toEqual(body(id));
    });

    it.runIf(target.name === 'postgres')(
      'reaches past the oldest events other workers hold: a lane beside busy lanes still gets one',
      async () => {
        const t = await open();
        const inbox = await stored(t);
        const db = await inbox.kysely();
        const ids = Array.from({ length: 12 }, () => uid('held'));
        for (const id of ids) expect((await deliver(inbox, id)).status).toBe(202);
        const take = (limit: number) =>
          `select id from ${inbox.tables.fn('take_pending')}('default', ${limit})`;
        // Eight oldest events in a batch that stays open, as a worker's batch does while its handlers run.
        let release!: () => void;
        const holding = new Promise<void>((resolve) => {
          release = resolve;
        });
        let heldIds: string[] = [];
        let held!: () => void;
        const taken = new Promise<void>((resolve) => {
          held = resolve;
        });
        const batch = db.transaction().execute(async (tx) => {
          heldIds = (await sql.raw<{ id: string }>(take(8)).execute(tx)).rows.map((r) => r.id);
          held();
          await holding;
        });
        await taken;
        try {
          expect(heldIds).toHaveLength(8);
          const other = await takeIn(db, take(1));
          expect(other).toHaveLength(1);
          expect(heldIds).not.toContain(other[0]!.id);
        } finally {
          release();
          await batch;
        }
      },
    );
  });
});
