import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { deadLetterText } from '../src/cli/format.js';
import { createConsole } from '../src/console/index.js';
import { createInbox, type Inbox, RetryLater } from '../src/index.js';
import { CONSOLE_TOKEN } from './support/console.js';
import { type TargetDb, targets } from './support/databases.js';

const json = (id: string, key: string, seq: number) => ({
  'idempotency-key': id,
  'x-key': key,
  'x-seq': String(seq),
  'content-type': 'application/json',
});

describe.each(targets)('drain failures count attempts ($name)', (target) => {
  let db: TargetDb;
  let inbox: Inbox | undefined;
  afterEach(async () => {
    await inbox?.close();
    await db?.close();
  });

  it('a poison event met by a drain backs off and is dead-lettered after maxAttempts', async () => {
    db = await target.open();
    let runs = 0;
    inbox = createInbox({
      db: db.db,
      schema: db.schema,
      sweepIntervalMs: 0,
      retryBaseMs: 1,
      retryCapMs: 1,
      maxAttempts: 3,
      handle: () => {
        runs++;
        throw new Error('poison');
      },
    });
    expect((await inbox.receive({ headers: json('b', 'k', 2), rawBody: Buffer.from('{}') })).status).toBe(
      202,
    );
    expect((await inbox.receive({ headers: json('a', 'k', 1), rawBody: Buffer.from('{}') })).status).toBe(
      500,
    );
    // Each sweeper pass drains the key once its backoff (≤ 1 ms) has passed.
    for (let pass = 0; pass < 10 && (await inbox.event('a'))?.status !== 'dead'; pass++) {
      await new Promise((r) => setTimeout(r, 5));
      await inbox.sweep();
    }
    const a = await inbox.event('a');
    expect(a?.status).toBe('dead');
    expect(a?.attempts).toBe(3);
    expect(runs).toBe(3);
    expect((await inbox.keyState('k'))?.state).toBe('blocked');
  });
});

describe.each(targets)('RetryLater waits without spending an attempt ($name)', (target) => {
  let db: TargetDb;
  let inbox: Inbox | undefined;
  afterEach(async () => {
    await inbox?.close();
    await db?.close();
  });

  it('the event is pending until the time asked for (shown as retry_at), then applied, in order, its attempt not counted', async () => {
    db = await target.open();
    const at = new Date(Date.now() + 3_600_000);
    const seen: Array<[string, number]> = [];
    // maxAttempts 1: one counted failure would dead-letter the event at once.
    inbox = createInbox({
      db: db.db,
      schema: db.schema,
      sweepIntervalMs: 0,
      maxAttempts: 1,
      handle: (event) => {
        seen.push([event.id, event.attempt]);
        const runs = seen.filter(([id]) => id === event.id).length;
        if (event.id === 'u-1' && runs === 1) throw new RetryLater({ at });
        if (event.id === 'u-1' && runs === 2) throw new RetryLater({ afterMs: 60_000 });
        if (event.id === 'o-1' && runs === 1) throw new RetryLater({ at });
        return { ok: true };
      },
    });
    const unordered = await inbox.receive({
      headers: { 'idempotency-key': 'u-1', 'content-type': 'application/json' },
      rawBody: Buffer.from('{}'),
    });
    expect([unordered.status, unordered.body]).toEqual([
      202,
      { status: 'pending', id: 'u-1', retryAt: at.toISOString() },
    ]);
    expect((await inbox.receive({ headers: json('o-1', 'k', 1), rawBody: Buffer.from('{}') })).status).toBe(
      202,
    );
    expect(
      (await inbox.receive({ headers: json('o-2', 'k', 2), rawBody: Buffer.from('{}') })).body,
    ).toMatchObject({
      status: 'held',
    });
    const u1 = await inbox.deadLetter('u-1');
    expect([u1.status, u1.attempts, u1.retryAt?.toISOString()]).toEqual(['pending', 0, at.toISOString()]);
    expect(deadLetterText(u1)).toContain(`retry_at:     ${at.toISOString()}`);
    expect((await inbox.deadLetter('o-1')).retryAt?.toISOString()).toBe(at.toISOString());
    const page = await createConsole({ inbox, token: CONSOLE_TOKEN }).handle({
      method: 'GET',
      url: '/events/default/u-1',
      headers: { host: 'ops.example', authorization: `Bearer ${CONSOLE_TOKEN}` },
    });
    expect(page.body).toContain(`<tr><th>retry_at</th><td>${at.toISOString()}</td></tr>`);

    // Before that time the sweeper leaves them.
    await inbox.sweep();
    expect(seen).toHaveLength(2);
    // The clock reaches it (moved by hand): applied; u-1 asks again, o-1 then o-2 apply in order.
    const k = await inbox.kysely();
    const due = () =>
      sql`update ${sql.table(`${db.schema}.events`)} set run_after = now() - interval '1 second'
                          where status in ('pending', 'held') and run_after is not null`.execute(k);
    await due();
    await inbox.sweep();
    const ran = seen.slice(2).map(([id]) => id);
    expect([...ran].sort()).toEqual(['o-1', 'o-2', 'u-1']);
    expect(ran.indexOf('o-1')).toBeLessThan(ran.indexOf('o-2'));
    expect((await inbox.deadLetter('u-1')).status).toBe('pending');
    await due();
    await inbox.sweep();
    expect(seen.filter(([id]) => id === 'u-1')).toEqual([
      ['u-1', 1],
      ['u-1', 1],
      ['u-1', 1],
    ]);
    expect(seen.filter(([id]) => id !== 'u-1')).toEqual([
      ['o-1', 1],
      ['o-1', 1],
      ['o-2', 1],
    ]);
    for (const id of ['u-1', 'o-1', 'o-2']) {
      const e = await inbox.deadLetter(id);
      expect([id, e.status, e.attempts]).toEqual([id, 'processed', 0]);
    }
  });
});
