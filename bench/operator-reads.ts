/**
 * What the operator's and the health check's reads cost on a large events table.
 *
 *   npx tsx bench/operator-reads.ts                  5,000,000 processed rows in two sources
 *   npx tsx bench/operator-reads.ts --rows 20000000  any size (about 250 bytes a row on disk)
 *
 * Seeds a fresh schema (`bench_reads_<random>`, dropped at the end) with processed rows, a few
 * held, pending and dead ones and a blocked key, ANALYZEs it, then times each read (the median
 * of 5, after one unmeasured): `stats` (every health check and metrics scrape), `status()` (the
 * console's overview, `webhook-inbox status`) of every source and of one, an event found by id
 * without a source (`dead show`, `replay`, `skip`), the console's chart of the last hour, and a
 * prune that finds nothing to do (what every sweeper pass sends when caught up). Each should
 * take milliseconds whatever the size: they read indexes (test/operator-queries-use-indexes.test.ts
 * checks their plans), never the whole table.
 */
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { createBackend } from '../src/console/backend.js';
import type { ResolvedConsoleOptions } from '../src/console/options.js';
import { StatementNames } from '../src/db/drivers/common.js';
import { createStats } from '../src/db/sql/stats.js';
import { createTables } from '../src/db/sql/tables.js';
import { createInbox } from '../src/index.js';
import { Operations } from '../src/operations/operations.js';

const argv = process.argv.slice(2);
const i = argv.indexOf('--rows');
const rows = i < 0 ? 5_000_000 : Number(argv[i + 1]);
if (!Number.isInteger(rows) || rows < 1) {
  console.error(`bench/operator-reads: --rows takes a whole number >= 1, not ${argv[i + 1]}`);
  process.exit(2);
}
const postgresUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `bench_reads_${randomBytes(3).toString('hex')}`;
const tables = createTables(schema, '');
const pool = new pg.Pool({ connectionString: postgresUrl, max: 2 });
const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) });

async function median(run: () => Promise<unknown>): Promise<number> {
  await run();
  const times: number[] = [];
  for (let n = 0; n < 5; n++) {
    const started = performance.now();
    await run();
    times.push(performance.now() - started);
  }
  return times.sort((a, b) => a - b)[2];
}

try {
  const inbox = createInbox({ db: postgresUrl, schema, handle: () => {}, sweepIntervalMs: 0 });
  await inbox.migrate();
  await inbox.close();
  const seeded = Date.now();
  // A day of events, a tenth of them in a second source; in steps, so no statement runs for long.
  for (let from = 0; from < rows; from += 1_000_000) {
    await pool.query(
      `insert into ${tables.events} (source, id, body_hash, status, processed_at, result, type)
       select case when g % 10 = 0 then 'other' else 'default' end, 'p-' || g,
              '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08', 'processed',
              now() - (g::float / $2) * interval '1 day', '{"ok":true}'::jsonb, 'invoice.paid'
         from generate_series($1::int, least($1::int + 999999, $2::int - 1)) g`,
      [from, rows],
    );
  }
  await pool.query(`
    insert into ${tables.events} (source, id, key, seq, body_hash, status) values
      ('default', 'held-1', 'k1', 2, 'h', 'held'), ('default', 'pending-1', null, null, 'h', 'pending');
    insert into ${tables.events} (source, id, body_hash, status, dead_reason) values ('default', 'dead-1', 'h', 'dead', 'poison');
    insert into ${tables.keys} (source, key, next_seq, state, blocked_seq, blocked_reason)
      values ('default', 'k1', 1, 'blocked', 1, 'gap');`);
  await pool.query(`vacuum analyze ${tables.events}`);
  await pool.query(`analyze ${tables.keys}`);
  const seedS = Math.round((Date.now() - seeded) / 1000);
  const { rows: size } = await pool.query(`select pg_size_pretty(pg_total_relation_size($1)) as size`, [
    tables.events,
  ]);

  const loadBefore = loadavg()[0];
  const stats = createStats(new StatementNames(), tables);
  const all = new Operations(db, tables);
  const one = new Operations(db, tables, 'default');
  const chart = (ops: Operations) =>
    createBackend({ operations: ops, inbox: undefined } as ResolvedConsoleOptions).processedPerMinute();
  const reads: Array<[string, () => Promise<unknown>]> = [
    ['stats (health, metrics scrape)', () => stats(db, 'default')],
    ['status(), every source', () => all.status()],
    ['status(), one source', () => one.status()],
    ['an event by id, no source', () => all.deadLetter('dead-1')],
    ["the console's chart, last hour", () => chart(one)],
    ['a prune with nothing to do', () => one.prune({ olderThan: '7d' })],
  ];
  const result: Record<string, string> = {};
  for (const [name, read] of reads) result[name] = `${(await median(read)).toFixed(1)} ms`;
  console.log(
    JSON.stringify(
      {
        rows,
        table: size[0].size,
        seededInS: seedS,
        medianOf5: result,
        load: `${loadBefore.toFixed(2)} → ${loadavg()[0].toFixed(2)}`,
      },
      null,
      2,
    ),
  );
} finally {
  if (!argv.includes('--keep')) await pool.query(`drop schema if exists "${schema}" cascade`).catch(() => {});
  else console.log(`kept schema ${schema}`);
  await db.destroy();
}
