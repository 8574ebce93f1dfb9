import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type Inbox, type PgPoolLike } from '../src/index.js';
import { postgresTarget, type TargetDb } from './support/databases.js';

// Real PostgreSQL: a pool whose first connection attempt fails (the server was restarting),
// then works, as a real pool does once the server is back.
describe.skipIf(!postgresTarget)('an inbox whose first start failed', () => {
  let t: TargetDb;
  let inbox: Inbox;
  let failures = 1;
  const applied: string[] = [];
  beforeAll(async () => {
    t = await postgresTarget!.open();
    const real = t.db as pg.Pool;
    const flaky: PgPoolLike = {
      connect: () => {
        if (failures-- > 0) return Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:5432'));
        return real.connect();
      },
    };
    inbox = createInbox({
      db: flaky,
      schema: t.schema,
      sweepIntervalMs: 0,
      handle: (event) => {
        applied.push(event.id);
      },
    });
  });
  afterAll(async () => {
    await inbox.close();
    await t.close();
  });
  const deliver = (id: string) =>
    inbox.receive({ headers: { 'idempotency-key': id }, rawBody: Buffer.from('x') });

  it('answers 503 while the database is unreachable, then opens it on the next delivery', async () => {
    expect((await deliver('e1')).status).toBe(503);
    expect((await deliver('e1')).kind).toBe('processed');
    expect(applied).toEqual(['e1']);
  });
});
