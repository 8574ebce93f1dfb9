/**
 * What operators and health checks read stays cheap on a big events table: `stats` (every health
 * check and metrics scrape), `status()` (the console's overview, `webhook-inbox status`) and the
 * look-up of an event by id without a source (`findEvent`: `dead show`, `replay`, `skip`) read
 * indexes, never the whole table. Checked on a seeded table of 120,000 processed rows in two
 * sources: each statement they send is planned by PostgreSQL (EXPLAIN, with its parameters), and
 * no plan reads the events table by a sequential scan. Past 100,000 processed rows, `status()`
 * gives PostgreSQL's estimate of them, and says so.
 */
import { type CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBackend } from '../src/console/backend.js';
import type { ResolvedConsoleOptions } from '../src/console/options.js';
import { StatementNames } from '../src/db/drivers/common.js';
import { createStats } from '../src/db/sql/stats.js';
import { createTables } from '../src/db/sql/tables.js';
import { createInbox } from '../src/index.js';
import { Operations } from '../src/operations/operations.js';
import { postgresTarget, postgresUrl, uniqueName } from './support/databases.js';

describe.runIf(postgresTarget)('operator and health queries on a big events table', () => {
  const schema = uniqueName('wi');
  const tables = createTables(schema, '');
  const sent: CompiledQuery[] = [];
  let pool: pg.Pool;
  let db: Kysely<any>;

  beforeAll(async () => {
    const inbox = createInbox({ db: postgresUrl!, schema, handle: () => {}, sweepIntervalMs: 0 });
    await inbox.migrate();
    await inbox.close();
    pool = new pg.Pool({ connectionString: postgresUrl!, max: 2 });
    const events = tables.events;
    await pool.query(`
      insert into ${events} (source, id, body_hash, status, processed_at, type, stream)
        select case when g % 10 = 0 then 'b' else 'a' end, 'p-' || g, 'h', 'processed',
               now() - g * interval '1 second', 'invoice.paid', 'p-' || g
          from generate_series(1, 120000) g;
      insert into ${events} (source, id, key, seq, body_hash, status, stream) values
        ('a', 'held-1', 'k1', 2, 'h', 'held', 'k1'), ('a', 'pending-1', null, null, 'h', 'pending', 'pending-1');
      insert into ${events} (source, id, body_hash, status, dead_reason, stream) values ('a', 'dead-1', 'h', 'dead', 'poison', 'dead-1');
      insert into ${events} (source, id, body_hash, status, processed_at, type, stream)
        values ('b', 'ignored-1', 'h', 'ignored', now(), 'customer.created', 'ignored-1');
      insert into ${tables.keys} (source, key, next_seq, state, blocked_seq, blocked_reason, stream)
        values ('a', 'k1', 1, 'blocked', 1, 'gap', 'k1');`);
    await pool.query(`vacuum analyze ${events}`);
    await pool.query(`analyze ${tables.keys}`);
    db = new Kysely({
      dialect: new PostgresDialect({ pool }),
      log: (event) => {
        if (event.level === 'query') sent.push(event.query);
      },
    });
  });
  afterAll(async () => {
    await pool?.query(`drop schema if exists "${schema}" cascade`);
    await db?.destroy();
  });

  /** The statements `run` sends, each with the plan PostgreSQL makes of it. */
  async function plans(run: () => Promise<unknown>): Promise<Array<{ sql: string; plan: string[] }>> {
    sent.length = 0;
    await run();
    const queries = sent.splice(0);
    expect(queries.length).toBeGreaterThan(0);
    return Promise.all(
      queries.map(async (q) => {
        const { rows } = await pool.query(`explain (format json) ${q.sql}`, q.parameters as unknown[]);
        const nodes: string[] = [];
        const walk = (node: any) => {
          nodes.push(`${node['Node Type']}${node['Relation Name'] ? ` on ${node['Relation Name']}` : ''}`);
          if (node['Index Cond']) nodes.push(`${node['Index Name']}: ${node['Index Cond']}`);
          for (const child of node.Plans ?? []) walk(child);
        };
        walk(rows[0]['QUERY PLAN'][0].Plan);
        return { sql: q.sql, plan: nodes };
      }),
    );
  }

  /** The console's reads over operations (only `operations` is read by them). */
  function backend(ops: Operations) {
    return createBackend({ operations: ops, inbox: undefined } as ResolvedConsoleOptions);
  }

  function noSeqScanOnEvents(found: Array<{ sql: string; plan: string[] }>) {
    for (const { sql, plan } of found) expect(plan, sql).not.toContain('Seq Scan on events');
  }

  it('stats (health, metrics) reads indexes', async () => {
    const stats = createStats(new StatementNames(), tables);
    let answer: Awaited<ReturnType<typeof stats>> | undefined;
    noSeqScanOnEvents(await plans(async () => (answer = await stats(db, 'a'))));
    expect(answer).toMatchObject({ held: 1, pending: 1, deadLetters: 1, blockedKeys: 1 });
  });

  it('status() reads indexes, with the processed rows estimated past 100,000', async () => {
    const ops = new Operations(db, tables);
    let all: Awaited<ReturnType<Operations['status']>> | undefined;
    noSeqScanOnEvents(await plans(async () => (all = await ops.status())));
    expect(all).toMatchObject({
      sources: ['a', 'b'],
      events: { pending: 1, held: 1, dead: 1 },
      processedIsEstimate: true,
      keys: { blocked: 1, holding: 1 },
      deadByReason: { poison: 1 },
      ignoredByType: { 'customer.created': 1 },
    });
    // Source a's 108,000 are past the bound: ANALYZE's sample, near the truth, not exact.
    expect(all!.events.processed).toBeGreaterThan(120_000 * 0.8);
    expect(all!.events.processed).toBeLessThan(120_000 * 1.2);

    // One source's: its 12,000 processed rows are under the bound, so counted exactly.
    let b: Awaited<ReturnType<Operations['status']>> | undefined;
    noSeqScanOnEvents(await plans(async () => (b = await ops.status('b'))));
    expect(b).toMatchObject({ sources: ['b'], events: { processed: 12_000 }, processedIsEstimate: false });
  });

  it('an event found by id without a source reads the primary key, source by source', async () => {
    const ops = new Operations(db, tables);
    let found: Awaited<ReturnType<Operations['deadLetter']>> | undefined;
    noSeqScanOnEvents(await plans(async () => (found = await ops.deadLetter('dead-1'))));
    expect(found).toMatchObject({ id: 'dead-1', source: 'a' });
    await expect(ops.deadLetter('p-20')).resolves.toMatchObject({ id: 'p-20', source: 'b' });
    await expect(ops.deadLetter('nowhere')).rejects.toThrow(/no event with id "nowhere"/);
  });

  it("the operator's other reads (dead letters, their groups, keys, ignored events, retention, the console's chart) read indexes too", async () => {
    const ops = new Operations(db, tables);
    const reads: Array<[string, () => Promise<unknown>]> = [
      ['deadLetters', () => ops.deadLetters()],
      ['deadGroups', () => ops.deadGroups()],
      ['countDead', () => ops.countDead({ reason: 'poison' })],
      ['keys', () => ops.keys()],
      ['key', () => ops.key('k1', 'a')],
      ['ignored', () => ops.ignored()],
      ['ignoredTypes', () => ops.ignoredTypes()],
      ['statuses', () => ops.statuses('a', ['p-1', 'dead-1'])],
      // Retention of every source (the CLI's prune), as a count and as the deletes it would send.
      ['prune --dry-run', () => ops.prune({ olderThan: '2d', dryRun: true })],
      ['prune', () => ops.prune({ olderThan: '2d' })],
      ['prune of one source', () => new Operations(db, tables, 'b').prune({ olderThan: '2d' })],
      // The console's chart of the last hour, over every source and over one.
      ['processed per minute', () => backend(ops).processedPerMinute()],
      [
        'processed per minute, one source',
        () => backend(new Operations(db, tables, 'a')).processedPerMinute(),
      ],
    ];
    for (const [name, read] of reads) {
      const found = await plans(read);
      for (const { sql, plan } of found) expect(plan, `${name}: ${sql}`).not.toContain('Seq Scan on events');
    }
    // The chart counts what it should: rows were processed one a second, the last hour's 3,600
    // (fewer by the seconds since they were written), a tenth of them in source b.
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    const all = sum(await backend(ops).processedPerMinute());
    expect(all).toBeGreaterThan(3_000);
    expect(all).toBeLessThanOrEqual(3_600);
    const b = sum(await backend(new Operations(db, tables, 'b')).processedPerMinute());
    expect(b).toBeGreaterThan(300);
    expect(b).toBeLessThanOrEqual(360);
    // One source's prune reads that source's old rows only: the index's condition names the
    // source, so another source's older rows are never stepped over.
    const pruneB = await plans(() => new Operations(db, tables, 'b').prune({ olderThan: '2d' }));
    const deletes = pruneB.filter((p) => p.sql.includes('delete from'));
    expect(deletes.length).toBeGreaterThan(0);
    for (const { plan } of deletes)
      expect(plan.join('\n')).toMatch(
        /events_(processed|ignored)_at: \(\(source = 'b'::text\) AND \(processed_at </,
      );
  });
});
