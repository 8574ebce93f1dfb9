/**
 * Retention at volume: can the sweeper prune as fast as events arrive?
 *
 *   npx tsx bench/retention.ts                         1 instance, 200,000 rows past retention,
 *                                                      5,000 new rows/s for 60 s, retention 10 s
 *   npx tsx bench/retention.ts --instances 2           two instances' sweepers on the same tables
 *   --seed N --rate R --seconds S --retention-s T      override any of those
 *
 * The rows are inserted by SQL in the shape the inbox writes (pruning is what is measured),
 * while the inboxes run their sweeper passes as their timer would. Reported: pruned per second,
 * rows past retention at the end, rows counted twice, dedup of redeliveries, PostgreSQL's CPU
 * and autovacuum; written to bench/results/retention-<N>.json.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { bodyHash } from '../src/delivery/payload.js';
import { createInbox, type Inbox } from '../src/index.js';
import { postgresCpuMs, postgresCpuMsSince } from './process-cpu.js';

const argv = process.argv.slice(2);
function count(name: string, fallback: number, min = 1): number {
  const i = argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const n = Number(argv[i + 1]);
  if (Number.isInteger(n) && n >= min) return n;
  console.error(`bench/retention: --${name} takes a whole number >= ${min}, not ${argv[i + 1]}`);
  process.exit(2);
}
const instances = count('instances', 1);
const seed = count('seed', 200_000, 0);
const rate = count('rate', 5_000, 0);
const seconds = count('seconds', 60);
const retentionS = count('retention-s', 10);
const postgresUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const schema = `bench_ret_${randomBytes(3).toString('hex')}`;
const source = 'default';
const body = Buffer.from('{"amount":1}');
const hash = bodyHash(body);
const admin = new pg.Pool({ connectionString: postgresUrl, max: 3 });
const events = `"${schema}".events`;

/** Inserts `n` processed rows with ids `${prefix}${from}…`, processed `ageS` seconds ago (spread over `spreadS`). */
async function insertRows(prefix: string, from: number, n: number, ageS: number, spreadS: number) {
  await admin.query(
    `insert into ${events} (source, id, body_hash, status, processed_at, result, type, stream)
     select $1, $2 || g, $3, 'processed', now() - ($4 + random() * $5) * interval '1 second',
            '{"ok":true}'::jsonb, 'invoice.paid', $2 || g
       from generate_series($6::int, $6::int + $7::int - 1) g`,
    [source, prefix, hash, ageS, spreadS, from, n],
  );
}

async function pastRetention(): Promise<{ rows: number; oldestLateS: number | null }> {
  const { rows } = await admin.query(
    `select count(*)::int as n,
            extract(epoch from (now() - $1::int * interval '1 second') - min(processed_at)) as late
       from ${events} where status = 'processed' and processed_at < now() - $1::int * interval '1 second'`,
    [retentionS],
  );
  return { rows: rows[0].n, oldestLateS: rows[0].late === null ? null : Number(rows[0].late) };
}

/** What autovacuum did to the events table: its runs so far, and the dead row versions it has to clean. */
async function vacuumState(): Promise<{ runs: number; deadRows: number }> {
  const { rows } = await admin.query(
    `select autovacuum_count::int as runs, n_dead_tup::int as dead from pg_stat_user_tables
      where schemaname = $1 and relname = 'events'`,
    [schema],
  );
  return { runs: rows[0]?.runs ?? 0, deadRows: rows[0]?.dead ?? 0 };
}

const inboxes: Inbox[] = [];
let running = true;
try {
  for (let i = 0; i < instances; i++) {
    const inbox = createInbox({
      db: postgresUrl,
      schema,
      handle: () => {},
      retention: retentionS * 1000,
      // The passes are run below, as the timer would, so that each one's report is counted.
      sweepIntervalMs: 0,
      logger: { warn() {}, error: (o: object, m?: string) => console.error(m, o) },
    });
    await inbox.migrate();
    inboxes.push(inbox);
  }
  // The seeded backlog, past retention by up to an hour, in steps of 50,000 rows.
  for (let done = 0; done < seed; done += 50_000)
    await insertRows('seed-', done, Math.min(50_000, seed - done), retentionS + 1, 3600);
  await admin.query(`vacuum analyze ${events}`);
  const sweepIntervalMs = 1000;
  const loadBefore = loadavg()[0];
  const vacuumBefore = await vacuumState();
  const pgBefore = postgresCpuMs();
  const started = Date.now();
  const pruned = inboxes.map(() => 0);
  const errors = inboxes.map(() => 0);
  const passes = inboxes.map(() => 0);

  // A pass, then the interval, as Sweeper.start() schedules them.
  const sweepers = inboxes.map(async (inbox, i) => {
    while (running) {
      try {
        const report = await inbox.sweep();
        pruned[i] += report.pruned;
        errors[i] += report.keyErrors;
      } catch (err) {
        errors[i]++;
        console.error(`instance ${i}: sweeper pass failed`, err);
      }
      passes[i]++;
      if (running) await new Promise((resolve) => setTimeout(resolve, sweepIntervalMs));
    }
  });

  // The ingest: every 100 ms the rows due by then, so the rate holds whatever one insert costs.
  let inserted = 0;
  const ingest = (async () => {
    while (running) {
      const due = Math.floor(((Date.now() - started) / 1000) * rate);
      if (due > inserted) {
        const n = due - inserted;
        await insertRows('new-', inserted, n, 0, 0);
        inserted += n;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();

  let backlogGoneS: number | null = null;
  const seeded = (await admin.query(`select count(*)::int as n from ${events} where id like 'seed-%'`))
    .rows[0].n;
  const watch = (async () => {
    while (running && backlogGoneS === null && seeded > 0) {
      const { rows } = await admin.query(
        `select exists (select 1 from ${events} where status = 'processed'
                         and processed_at < now() - $1::int * interval '1 second' - interval '1 second'
                         and id like 'seed-%') as left`,
        [retentionS],
      );
      if (!rows[0].left) backlogGoneS = (Date.now() - started) / 1000;
      else await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  })();

  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const atEnd = await pastRetention();
  const elapsedS = (Date.now() - started) / 1000;
  running = false;
  await Promise.all([...sweepers, ingest, watch]);
  const pgMs = postgresCpuMsSince(pgBefore);
  const loadAfter = loadavg()[0];
  const vacuumAfter = await vacuumState();

  // No row counted twice: what the instances say they pruned is exactly what is gone.
  const { rows: left } = await admin.query(`select count(*)::int as n from ${events}`);
  const gone = seed + inserted - left[0].n;
  const prunedTotal = pruned.reduce((a, b) => a + b, 0);

  // Dedup intact: the newest rows (inside retention) are each a duplicate when delivered again.
  const { rows: recent } = await admin.query(
    `select id from ${events} where status = 'processed' order by processed_at desc limit 100`,
  );
  let duplicates = 0;
  for (const { id } of recent) {
    const outcome = await inboxes[0].receive({
      headers: { 'idempotency-key': id, 'content-type': 'application/json' },
      rawBody: body,
    });
    if (outcome.kind === 'duplicate') duplicates++;
    else console.error(`redelivery of ${id}: ${outcome.kind} (${outcome.status})`);
  }

  const result = {
    instances,
    seeded: seed,
    ingestPerS: Math.round(inserted / elapsedS),
    retentionS,
    seconds: Math.round(elapsedS),
    pruned: prunedTotal,
    prunedPerS: Math.round(prunedTotal / elapsedS),
    prunedPerInstance: pruned,
    passesPerInstance: passes,
    backlogGoneAfterS: backlogGoneS === null ? null : Math.round(backlogGoneS * 10) / 10,
    pastRetentionAtEnd: atEnd.rows,
    oldestPastRetentionLateS: atEnd.oldestLateS === null ? null : Math.round(atEnd.oldestLateS * 10) / 10,
    errors: errors.reduce((a, b) => a + b, 0),
    countedTwice: prunedTotal - gone,
    redeliveredDuplicates: `${duplicates}/${recent.length}`,
    postgresCpuMsPerThousandPruned: prunedTotal ? Math.round((pgMs * 1000) / prunedTotal) : null,
    postgresCpuShare: Math.round((pgMs / (elapsedS * 1000)) * 100) / 100,
    autovacuumRuns: vacuumAfter.runs - vacuumBefore.runs,
    deadRowVersionsAtEnd: vacuumAfter.deadRows,
    load: `${loadBefore.toFixed(2)} → ${loadAfter.toFixed(2)}`,
    command: `npx tsx bench/retention.ts ${argv.join(' ')}`.trim(),
    at: new Date().toISOString(),
  };
  console.log(JSON.stringify(result, null, 2));
  const results = join(dirname(fileURLToPath(import.meta.url)), 'results');
  mkdirSync(results, { recursive: true });
  writeFileSync(join(results, `retention-${instances}.json`), `${JSON.stringify(result, null, 2)}\n`);
  const keptUp = atEnd.oldestLateS === null || atEnd.oldestLateS < 60;
  if (result.countedTwice !== 0 || duplicates !== recent.length || result.errors > 0) process.exitCode = 1;
  console.log(
    `retention ${keptUp ? 'kept up' : 'fell behind'}: ${result.prunedPerS} rows/s pruned with ${instances} instance(s) ` +
      `against ${result.ingestPerS} rows/s ingested; ${atEnd.rows} rows past retention at the end ` +
      `(oldest ${result.oldestPastRetentionLateS ?? 0} s late); load ${result.load}`,
  );
} finally {
  running = false;
  await Promise.all(inboxes.map((i) => i.close().catch(() => {})));
  await admin.query(`drop schema if exists "${schema}" cascade`).catch(() => {});
  await admin.end();
}
