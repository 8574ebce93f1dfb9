/**
 * Retention at volume: a prune that finds a backlog deletes it in batches that grow (1,000, then
 * doubling up to `batchSize`), says when it stopped with rows left (`behind`), and never touches
 * a row inside retention, which stays the dedup record of its event. A row another transaction
 * holds is stepped over, not waited for (every instance's sweeper prunes, and an operator's
 * prune may run beside them), and goes at the next prune.
 */
import { sql } from 'kysely';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { bodyHash } from '../src/delivery/payload.js';
import { createInbox, type Inbox, openOperations } from '../src/index.js';
import { postgresTarget, postgresUrl, type TargetDb, targets } from './support/databases.js';
import { perTestSchemas } from './support/per-test-schemas.js';

const body = Buffer.from('{"amount":1}');

/** `old` processed rows a day past a 1 h retention, and `recent` processed ones now. */
async function seed(inbox: Inbox, schema: string, old: number, recent: number) {
  const events = sql.table(`${schema}.events`);
  await sql`insert into ${events} (source, id, body_hash, status, processed_at, stream)
    select 'default', 'old-' || g, ${bodyHash(body)}, 'processed', now() - interval '1 day', 'old-' || g
      from generate_series(1, ${old}::int) g
    union all
    select 'default', 'new-' || g, ${bodyHash(body)}, 'processed', now(), 'new-' || g
      from generate_series(1, ${recent}::int) g`.execute(await inbox.kysely());
}

async function count(inbox: Inbox, schema: string, like: string): Promise<number> {
  const { rows } = await sql<{ n: number }>`select count(*)::int as n from ${sql.table(`${schema}.events`)}
    where id like ${like}`.execute(await inbox.kysely());
  return rows[0].n;
}

describe.each(targets)('a prune that finds a backlog ($name)', (target) => {
  const database = perTestSchemas(target);
  let t: TargetDb;
  let inbox: Inbox;
  beforeEach(async () => {
    t = database();
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      handle: () => {},
      sweepIntervalMs: 0,
      retention: '1h',
    });
    await inbox.migrate();
  });
  afterEach(async () => {
    await inbox.close();
  });

  it('deletes it in growing batches, says when it stopped early, and leaves every row inside retention a duplicate', async () => {
    await seed(inbox, t.schema, 25_000, 100);
    // Two batches: 1,000, then 2,000.
    const first = await inbox.prune({ olderThan: '1h', maxBatches: 2 });
    expect(first).toMatchObject({ pruned: 3_000, behind: true });
    // The rest: 4,000, 8,000, 10,000 (the largest), then the 0 left.
    const rest = await inbox.prune({ olderThan: '1h' });
    expect(rest).toMatchObject({ pruned: 22_000, behind: false });
    expect(await count(inbox, t.schema, 'old-%')).toBe(0);
    expect(await count(inbox, t.schema, 'new-%')).toBe(100);
    // Dedup inside retention intact: a redelivery of a row kept is a duplicate, not applied again.
    const again = await inbox.receive({
      headers: { 'idempotency-key': 'new-7', 'content-type': 'application/json' },
      rawBody: body,
    });
    expect(again.kind).toBe('duplicate');
    // A bound that is not one is refused, naming it.
    await expect(inbox.prune({ olderThan: '1h', maxMs: -1 })).rejects.toThrow(
      /`maxMs` must be a number of ms/,
    );
  });

  it('a sweeper pass prunes more than one batch while behind, and the next passes finish it', async () => {
    await seed(inbox, t.schema, 6_000, 10);
    // One batch of 1,000 a pass was the old rate; a pass now goes on while its batches are full.
    const first = await inbox.sweep();
    expect(first.pruned).toBeGreaterThan(1_000);
    let pruned = first.pruned;
    while (pruned < 6_000) pruned += (await inbox.sweep()).pruned;
    expect(pruned).toBe(6_000);
    expect(await count(inbox, t.schema, 'new-%')).toBe(10);
  });
});

describe.runIf(postgresTarget)('a prune beside another transaction (postgres)', () => {
  const database = perTestSchemas(postgresTarget!);

  it('steps over a row another transaction holds instead of waiting for it, and takes it at the next prune', async () => {
    const t = database();
    const inbox = createInbox({ db: t.db, schema: t.schema, handle: () => {}, sweepIntervalMs: 0 });
    await inbox.migrate();
    await seed(inbox, t.schema, 2_500, 0);
    const holder = new pg.Client({ connectionString: postgresUrl! });
    // A prune that waited for the held row would fail here after a second, not hang the suite.
    const pool = new pg.Pool({ connectionString: postgresUrl!, max: 2, options: '-c lock_timeout=1000' });
    const ops = await openOperations({ db: pool, schema: t.schema });
    try {
      await holder.connect();
      await holder.query('begin');
      await holder.query(`select 1 from "${t.schema}".events where id = 'old-42' for update`);
      expect(await ops.prune({ olderThan: '1h' })).toMatchObject({ pruned: 2_499, behind: false });
      await holder.query('commit');
      expect(await ops.prune({ olderThan: '1h' })).toMatchObject({ pruned: 1 });
      expect(await count(inbox, t.schema, 'old-%')).toBe(0);
    } finally {
      await holder.end();
      await ops.close();
      await pool.end();
      await inbox.close();
    }
  });
});
