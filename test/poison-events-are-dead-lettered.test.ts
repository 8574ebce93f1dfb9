/**
 * With default options a failing handler is retried for `retryFor` (24 h), not a handful of
 * attempts: an outage costs retries, and the event is applied once it is over. A handler that
 * fails forever stops when its budget is spent, or after `maxAttempts` when given: the event is
 * dead-lettered, the sender is told to stop, its key is blocked and later events of the key are held; an operator
 * replays it (after fixing the handler) or skips it, and the key drains in order.
 */
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Ledger } from '../examples/ledger/ledger.js';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { createInbox, type Inbox, type InboxEvent } from '../src/index.js';
import { type TargetDb, targets } from './support/databases.js';
import { deliver } from './support/deliver.js';
import { perTestSchemas } from './support/per-test-schemas.js';

function delivery(id: string, amount: number, order?: { key: string; seq: number }) {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'idempotency-key': id };
  if (order) {
    headers['x-key'] = order.key;
    headers['x-seq'] = String(order.seq);
  }
  return { headers, rawBody: Buffer.from(JSON.stringify({ amount })) };
}

describe.each(targets)('poison events ($name)', (target) => {
  const database = perTestSchemas(target);
  let t: TargetDb;
  let server: LedgerServer | undefined;
  let inbox: Inbox | undefined;

  beforeEach(() => {
    t = database();
  });
  afterEach(async () => {
    await server?.close();
    await inbox?.close();
    server = undefined;
    inbox = undefined;
  });

  async function ledgerServer(options: Record<string, unknown> = {}) {
    server = await startLedger({
      testHooks: true,
      ledgerSchema: t.appSchema,
      inbox: { db: t.db, schema: t.schema, sweepIntervalMs: 0, maxAttempts: 3, ...options },
    });
    return server;
  }

  /**
   * Moves an event's arrival back by `ms` and makes its retry due now: what waiting that long
   * would have done, without waiting.
   */
  async function age(inbox: Inbox, id: string, ms: number) {
    await sql`update ${sql.table(`${t.schema}.events`)}
      set received_at = received_at - ${ms} * interval '1 millisecond', run_after = now()
      where id = ${id}`.execute(await inbox.kysely());
  }

  it('with default options, a handler failing for 60 s and then recovering is applied once and never dead-lettered', async () => {
    const { url, ledger, inbox } = await ledgerServer({ maxAttempts: undefined });
    ledger.failNext.set('acct-p', 1_000_000);
    expect((await deliver(url, 'p-1', { amount: 7 }, { key: 'acct-p', seq: 1 })).status).toBe(500);
    // Sixty seconds of failures, ten at a time: the sweeper retries, and so does the provider,
    // whose redeliveries run the handler too and are answered 500 while it fails
    // (docs/outcomes.md: the provider keeps its own retries going).
    for (let second = 10; second <= 60; second += 10) {
      await age(inbox, 'p-1', 10_000);
      await inbox.sweep();
      const redelivery = await deliver(url, 'p-1', { amount: 7 }, { key: 'acct-p', seq: 1 });
      expect(redelivery.status).toBe(500);
      expect(redelivery.body).toMatchObject({ title: 'Handler failed', id: 'p-1' });
    }
    expect(await inbox.deadLetters()).toEqual([]);
    const waiting = await inbox.event('p-1');
    // More failures than the five the old default allowed, and still waiting for a retry.
    expect(waiting).toMatchObject({ status: 'pending', attempts: 13 });

    ledger.failNext.delete('acct-p');
    await age(inbox, 'p-1', 10_000);
    await inbox.sweep();
    expect(await ledger.account(await inbox.kysely(), 'acct-p')).toMatchObject({
      balance: 7,
      entries: [{ seq: 1 }],
    });
    expect((await deliver(url, 'p-1', { amount: 7 }, { key: 'acct-p', seq: 1 })).body.status).toBe(
      'duplicate',
    );
    expect(await inbox.deadLetters()).toEqual([]);
    expect((await ledger.account(await inbox.kysely(), 'acct-p')).balance).toBe(7);
  });

  it('with default options, a failure after 24 h of retries dead-letters the event', async () => {
    const { url, ledger, inbox } = await ledgerServer({ maxAttempts: undefined });
    ledger.failNext.set('none', 1_000_000);
    expect((await deliver(url, 'q-1', { amount: 1 })).status).toBe(500);
    await age(inbox, 'q-1', 23 * 3_600_000);
    expect((await deliver(url, 'q-1', { amount: 1 })).status).toBe(500);
    await age(inbox, 'q-1', 3_600_000);
    expect((await deliver(url, 'q-1', { amount: 1 })).body).toEqual({
      status: 'dead-lettered',
      id: 'q-1',
      reason: 'poison',
    });
    expect(await inbox.deadLetters()).toMatchObject([{ id: 'q-1', attempts: 3, deadReason: 'poison' }]);
  });

  it('a handler failing forever is dead-lettered after maxAttempts, holds its key, and a replay drains the key in order', async () => {
    const { url, ledger, inbox } = await ledgerServer();
    ledger.failNext.set('acct-1', 1_000_000);

    // The sender retries on 500; the third failure is the last: 200 dead-lettered, stop.
    const replies = [];
    for (let i = 0; i < 3; i++)
      replies.push(await deliver(url, 'evt-1', { amount: 10 }, { key: 'acct-1', seq: 1 }));
    expect(replies.map((r) => r.status)).toEqual([500, 500, 200]);
    expect(replies[0].body).toMatchObject({ status: 500, title: 'Handler failed' });
    expect(JSON.stringify(replies[0].body)).not.toContain('failing on purpose');
    expect(replies[2].body).toEqual({ status: 'dead-lettered', id: 'evt-1', reason: 'poison' });

    // Later events of the key are held behind it, not applied.
    expect((await deliver(url, 'evt-2', { amount: 20 }, { key: 'acct-1', seq: 2 })).status).toBe(202);
    expect((await deliver(url, 'evt-3', { amount: 30 }, { key: 'acct-1', seq: 3 })).status).toBe(202);
    // A redelivery of the poison event keeps answering "stop".
    const again = await deliver(url, 'evt-1', { amount: 10 }, { key: 'acct-1', seq: 1 });
    expect(again.status).toBe(200);
    expect(again.body.status).toBe('dead-lettered');
    await inbox.sweep();
    expect(await ledger.account(await inbox.kysely(), 'acct-1')).toEqual({
      key: 'acct-1',
      balance: 0,
      entries: [],
    });

    // What an operator sees.
    const [dead] = await inbox.deadLetters();
    expect(dead).toMatchObject({
      id: 'evt-1',
      key: 'acct-1',
      seq: 1,
      deadReason: 'poison',
      attempts: 3,
      blocking: true,
    });
    expect(dead.lastError).toContain('failing on purpose for account acct-1');
    expect(JSON.parse(dead.payload!.toString())).toEqual({ amount: 10 });
    const keys = await inbox.keys();
    expect(keys).toMatchObject([
      { key: 'acct-1', state: 'blocked', blockedSeq: 1, blockedReason: 'poison', nextSeq: 1, heldCount: 2 },
    ]);
    expect(await inbox.status()).toMatchObject({
      events: { dead: 1, held: 2, processed: 0 },
      keys: { blocked: 1, holding: 1 },
      deadByReason: { poison: 1 },
    });

    // The handler is fixed; the replay goes through the inbox and the key drains in order.
    ledger.failNext.delete('acct-1');
    const results = await inbox.replay('evt-1');
    expect(results).toEqual([
      { source: 'default', id: 'evt-1', key: 'acct-1', seq: 1, outcome: 'requeued', status: 'processed' },
    ]);
    await inbox.idle();
    const account = await ledger.account(await inbox.kysely(), 'acct-1');
    expect(account.entries.map((e) => e.seq)).toEqual([1, 2, 3]);
    expect(account.balance).toBe(60);
    expect(await inbox.keys()).toEqual([]);
    expect(await inbox.deadLetters()).toEqual([]);
    // Every later delivery of those events is a duplicate now.
    const dup = await deliver(url, 'evt-1', { amount: 10 }, { key: 'acct-1', seq: 1 });
    expect(dup.status).toBe(200);
    expect(dup.body.status).toBe('duplicate');
    // Replaying what is no longer dead changes nothing.
    expect((await inbox.replay(['evt-1', 'nope'])).map((r) => r.outcome)).toEqual(['not-dead', 'not-found']);
    expect((await ledger.account(await inbox.kysely(), 'acct-1')).balance).toBe(60);
  });

  it('POST /fail-next shows poison end to end over HTTP, and an unordered dead letter replays once', async () => {
    const { url, ledger, inbox } = await ledgerServer({ maxAttempts: 2 });
    const armed = await fetch(`${url}/fail-next`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key: 'none', times: 2 }),
    });
    expect(armed.status).toBe(200);
    expect((await deliver(url, 'u-1', { amount: 5 })).status).toBe(500);
    const dead = await deliver(url, 'u-1', { amount: 5 });
    expect(dead.body).toEqual({ status: 'dead-lettered', id: 'u-1', reason: 'poison' });
    expect((await ledger.account(await inbox.kysely(), 'none')).entries).toEqual([]);

    // The /fail-next budget is spent: the handler works again.
    expect(await inbox.replay({ all: true, reason: 'poison' })).toMatchObject([
      { id: 'u-1', key: null, outcome: 'requeued', status: 'processed' },
    ]);
    expect((await ledger.account(await inbox.kysely(), 'none')).balance).toBe(5);
    expect((await deliver(url, 'u-1', { amount: 5 })).body.status).toBe('duplicate');
    expect((await ledger.account(await inbox.kysely(), 'none')).entries).toHaveLength(1);
  });

  it('held events that fail during a drain count attempts, become poison, and skip moves the key past them', async () => {
    const ledger = new Ledger(t.appSchema);
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      maxAttempts: 3,
      retryBaseMs: 1,
      retryCapMs: 1,
      handle: (event: InboxEvent, ctx) => {
        if (event.seq === 2) throw new Error('seq 2 is poison');
        return ledger.handle(event, ctx);
      },
    });
    await ledger.setup(await inbox.kysely());
    expect((await inbox.receive(delivery('b-2', 2, { key: 'acct-b', seq: 2 }))).status).toBe(202);
    expect((await inbox.receive(delivery('b-3', 3, { key: 'acct-b', seq: 3 }))).status).toBe(202);
    expect((await inbox.receive(delivery('b-1', 1, { key: 'acct-b', seq: 1 }))).status).toBe(200);
    await inbox.idle(); // the drain after seq 1: seq 2 fails once
    for (let pass = 0; pass < 20 && (await inbox.deadLetters()).length === 0; pass++) await inbox.sweep();

    const [dead] = await inbox.deadLetters();
    expect(dead).toMatchObject({ id: 'b-2', seq: 2, attempts: 3, deadReason: 'poison', blocking: true });
    expect(dead.lastError).toContain('seq 2 is poison');
    expect((await ledger.account(await inbox.kysely(), 'acct-b')).entries.map((e) => e.seq)).toEqual([1]);
    expect(await inbox.keyState('acct-b')).toMatchObject({ state: 'blocked', blockedSeq: 2, heldSeqs: [3] });

    const skipped = await inbox.skip({ id: 'b-2' });
    expect(skipped).toEqual({
      source: 'default',
      key: 'acct-b',
      fromSeq: 2,
      toSeq: 2,
      nextSeq: 3,
      drained: 1,
    });
    expect((await ledger.account(await inbox.kysely(), 'acct-b')).entries.map((e) => e.seq)).toEqual([1, 3]);
    const detail = await (await inbox.operations()).key('acct-b');
    expect(detail).toMatchObject({ state: 'open', nextSeq: 4, heldCount: 0 });
    expect(detail!.gaps).toMatchObject([{ fromSeq: 2, toSeq: 2, reason: 'skip' }]);
    // The skipped event stays dead (the record); its redelivery is still told to stop.
    expect((await inbox.receive(delivery('b-2', 2, { key: 'acct-b', seq: 2 }))).body).toMatchObject({
      status: 'dead-lettered',
    });
    // Skipping again is refused and changes nothing.
    await expect(inbox.skip({ id: 'b-2' })).rejects.toMatchObject({ code: 'refused' });
    expect((await inbox.keyState('acct-b'))!.nextSeq).toBe(4);
  });

  it("a key's first event that turns poison still blocks the key (firstSeq 'first-seen')", async () => {
    const { url, ledger, inbox } = await ledgerServer({ maxAttempts: 2, firstSeq: 'first-seen' });
    ledger.failNext.set('acct-c', 1_000_000);
    expect((await deliver(url, 'c-5', { amount: 5 }, { key: 'acct-c', seq: 5 })).status).toBe(500);
    expect((await deliver(url, 'c-5', { amount: 5 }, { key: 'acct-c', seq: 5 })).body.status).toBe(
      'dead-lettered',
    );
    ledger.failNext.delete('acct-c');
    // The cursor stays at the poison seq: seq 6 is held, not applied past it.
    expect((await deliver(url, 'c-6', { amount: 6 }, { key: 'acct-c', seq: 6 })).status).toBe(202);
    expect((await ledger.account(await inbox.kysely(), 'acct-c')).entries).toEqual([]);
    expect(await inbox.keyState('acct-c')).toMatchObject({ nextSeq: 5, state: 'blocked', blockedSeq: 5 });
    // Unblock reopens the key without moving the cursor: seq 6 still waits for seq 5.
    expect(await inbox.unblock('acct-c')).toMatchObject({ state: 'open', nextSeq: 5, drained: 0 });
    expect((await ledger.account(await inbox.kysely(), 'acct-c')).entries).toEqual([]);
    expect((await inbox.replay('c-5'))[0].status).toBe('processed');
    expect((await ledger.account(await inbox.kysely(), 'acct-c')).entries.map((e) => e.seq)).toEqual([5, 6]);
  });

  it("onPoison 'skip' records the poison seq as a gap and applies what follows", async () => {
    const { url, ledger, inbox } = await ledgerServer({ maxAttempts: 1, onPoison: 'skip' });
    expect((await deliver(url, 'd-2', { amount: 2 }, { key: 'acct-d', seq: 2 })).status).toBe(202);
    ledger.failNext.set('acct-d', 1);
    expect((await deliver(url, 'd-1', { amount: 1 }, { key: 'acct-d', seq: 1 })).body).toMatchObject({
      status: 'dead-lettered',
      reason: 'poison',
    });
    await inbox.idle();
    expect((await ledger.account(await inbox.kysely(), 'acct-d')).entries.map((e) => e.seq)).toEqual([2]);
    // Its key moved past it: replaying it would apply it out of order, so it is refused.
    expect((await inbox.replay('d-1'))[0]).toMatchObject({ outcome: 'behind-cursor', status: 'dead' });
    const detail = await (await inbox.operations()).key('acct-d');
    expect(detail!.gaps).toMatchObject([{ fromSeq: 1, toSeq: 1, reason: 'poison' }]);
  });
});
