import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { type TargetDb, targets } from './support/databases.js';

describe.each(targets)('a held event whose handler fails during a drain, on $name', (target) => {
  let t: TargetDb;
  let inbox: Inbox;
  const applied: number[] = [];
  const failSeq = 2;
  beforeAll(async () => {
    t = await target.open();
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      maxAttempts: 2,
      retryBaseMs: 1,
      retryCapMs: 1,
      handle: (e) => {
        if (e.seq === failSeq) throw new Error('poison');
        applied.push(e.seq!);
      },
    });
  });
  afterAll(async () => {
    await inbox.close();
    await t.close();
  });
  const deliver = (seq: number) =>
    inbox.receive({
      headers: {
        'idempotency-key': `e${seq}`,
        'x-key': 'acct',
        'x-seq': String(seq),
        'content-type': 'application/json',
      },
      rawBody: Buffer.from(`{"seq":${seq}}`),
    });

  it('counts the attempt, retries from the sweeper, then dead-letters it and blocks the key', async () => {
    expect((await deliver(3)).kind).toBe('held');
    expect((await deliver(2)).kind).toBe('held');
    expect((await deliver(1)).kind).toBe('processed');
    await inbox.idle(); // the drain after seq 1: seq 2 fails once
    expect(applied).toEqual([1]);
    expect(await inbox.event('e2')).toMatchObject({ status: 'held', attempts: 1 });
    await inbox.sweep(); // retried by the sweeper: fails again, now poison
    expect(await inbox.event('e2')).toMatchObject({ status: 'dead', attempts: 2, deadReason: 'poison' });
    expect(await inbox.keyState('acct')).toMatchObject({
      nextSeq: 2,
      state: 'blocked',
      blockedSeq: 2,
      heldSeqs: [3],
    });
    await inbox.sweep();
    expect(applied).toEqual([1]); // seq 3 stays held behind the blocked seq
    expect((await deliver(2)).body).toMatchObject({ status: 'dead-lettered', reason: 'poison' });
  });
});
