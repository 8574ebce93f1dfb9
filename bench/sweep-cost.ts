/**
 * What one sweeper pass's statement costs with many ordered events waiting, the walk (`sweep`,
 * 6 parameters, migration 0007) beside the aggregate it replaced (`sweep`, 4 parameters, kept
 * for earlier versions in a rolling deploy), in the same schema and the same run.
 *
 *   npx tsx bench/sweep-cost.ts                           100,000 events on 1,000 keys, backlog
 *   npx tsx bench/sweep-cost.ts --events 1000000 --keys 10000 --shape young
 *
 * Shapes: `backlog` (deferred mode behind its workers: each key's event at the cursor pending,
 * the rest held behind it) and `young` (each key missing its next seq, the events behind it
 * just arrived: no gap due yet). Seeds a fresh schema (dropped at the end), ANALYZEs it, then
 * times each statement in a transaction rolled back (the median of 5): the time a pass holds
 * the acknowledgement connection it runs on.
 */
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import pg from 'pg';
import { createTables } from '../src/db/sql/tables.js';
import { createInbox } from '../src/index.js';

const argv = process.argv.slice(2);
const arg = (name: string, fallback: string) => {
  const i = argv.indexOf(`--${name}`);
  return i < 0 ? fallback : (argv[i + 1] ?? fallback);
};
const events = Number(arg('events', '100000'));
const keys = Number(arg('keys', '1000'));
const shape = arg('shape', 'backlog');
if (!['backlog', 'young'].includes(shape)) throw new Error(`--shape: 'backlog' or 'young', not ${shape}`);
if (!(keys >= 1 && events >= keys && events % keys === 0))
  throw new Error('--events must be a multiple of --keys, both positive');

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `bench_sweep_${randomBytes(4).toString('hex')}`;
const t = createTables(schema, '');
const admin = new pg.Pool({ connectionString: url, max: 1 });
const inbox = createInbox({
  db: url,
  schema,
  source: 's',
  mode: 'deferred',
  workers: 0,
  sweepIntervalMs: 0,
  handle: () => {},
  logger: false,
});
try {
  await inbox.ready();
  const per = events / keys;
  const backlog = shape === 'backlog';
  await admin.query(`
    insert into ${t.keys} (source, key, next_seq) select 's', 'k' || k, 1 from generate_series(1, ${keys}) k;
    insert into ${t.events} (source, id, key, seq, body_hash, status, payload, received_at)
      select 's', 'k' || k || ':' || g, 'k' || k, g, 'h', case when g = 1 then 'pending' else 'held' end,
             '\\x7b7d'::bytea, now() - interval '${backlog ? '10 seconds' : '0 seconds'}'
        from generate_series(1, ${keys}) k, generate_series(${backlog ? 1 : 2}, ${backlog ? per : per + 1}) g;
    analyze ${t.events}; analyze ${t.keys};`);
  const statements = [
    ['aggregate (4 parameters, 500 keys)', `select count(*) from ${t.fn('sweep')}('s', 30000, 'skip', 500)`],
    [
      'walk (6 parameters, 500 chosen, 1,000 examined)',
      `select count(*) from ${t.fn('sweep')}('s', 30000, 'skip', 500, null, 1000)`,
    ],
  ] as const;
  console.log(
    `bench/sweep-cost.ts — ${events} events on ${keys} keys, ${shape}; load ${loadavg()[0].toFixed(2)}`,
  );
  for (const [name, text] of statements) {
    const times: number[] = [];
    for (let i = 0; i < 5; i++) {
      const began = performance.now();
      await admin.query('begin');
      await admin.query(text);
      await admin.query('rollback');
      times.push(performance.now() - began);
    }
    times.sort((a, b) => a - b);
    console.log(`  ${name}: median ${times[2]!.toFixed(1)} ms`);
  }
  console.log(`  load after: ${loadavg()[0].toFixed(2)}`);
} finally {
  await inbox.close();
  await admin.query(`drop schema if exists ${schema} cascade`);
  await admin.end();
}
