import { afterEach, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
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
