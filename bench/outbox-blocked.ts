/**
 * The outbox with a large blocked backlog, on real Postgres: how long `outstanding()` and
 * `claim` take when 200,000 events wait behind heads that cannot go (one key behind a dead
 * letter, a hundred keys retried in an hour), enqueued by the outbox's own `enqueue`.
 *
 *   npx tsx bench/outbox-blocked.ts [blocked=200000] [runs=30]
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test (the default)
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import pg from 'pg';
import { OutboxStore } from '../src/sender/index.js';
import { percentile } from './post.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const blocked = Number(process.argv[2] ?? 200_000);
const runs = Number(process.argv[3] ?? 30);
const slowKeys = 100;
const claimLimit = 16;

function summary(ms: number[]): string {
  const at = (p: number) => percentile(ms, p).toFixed(2);
  return `p50 ${at(50)} ms, p95 ${at(95)} ms, max ${Math.max(...ms).toFixed(2)} ms (${ms.length} runs)`;
}

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const start = performance.now();
  const value = await fn();
  return [value, performance.now() - start];
}

const schema = `bench_outbox_${randomBytes(4).toString('hex')}`;
const pool = new pg.Pool({ connectionString: url, max: 4 });
const store = await OutboxStore.open(pool, { schema, migrate: true, poolSize: 4 });
const db = store.kysely;
const enqueue = sql.raw(`"${schema}"."enqueue"`);
const events = sql.table(`${schema}.events`);
const en = (n: number) => n.toLocaleString('en');
try {
  // Half behind one dead letter, half spread over keys whose heads are retried in an hour.
  const perSlowKey = Math.floor(blocked / 2 / slowKeys);
  const behindDead = blocked - perSlowKey * slowKeys;
  const [, fillMs] = await timed(async () => {
    // 1,000 enqueues per statement: one transaction updating a key row 100,000 times walks an
    // ever longer chain of that row's versions.
    const fill = async (key: string, n: number) => {
      for (let from = 0; from <= n; from += 1000)
        await sql`select ${enqueue}(${key} || '-' || i, ${key}, null, '\\x7b7d'::bytea, 'application/json', '{}'::jsonb)
                    from generate_series(${from}::int, ${Math.min(n, from + 999)}::int) i`.execute(db);
    };
    await fill('dead', behindDead);
    for (let k = 0; k < slowKeys; k++) await fill(`slow-${k}`, perSlowKey);
  });
  const heads = await store.claim(slowKeys + 1, 60_000);
  const [, deadMs] = await timed(() =>
    store.deadLetter(heads.find((h) => h.key === 'dead')!, 'rejected', 'HTTP 400: bench'),
  );
  for (const h of heads) if (h.key !== 'dead') await store.retryLater(h, 3_600_000, 'HTTP 503: bench', true);
  // Deliverable work: unordered events, enough for every timed claim.
  await sql`select ${enqueue}('u-' || i, null, null, '\\x7b7d'::bytea, 'application/json', '{}'::jsonb)
              from generate_series(1, ${runs * claimLimit + claimLimit}) i`.execute(db);
  await sql`vacuum analyze ${events}, ${sql.table(`${schema}.keys`)}`.execute(db);

  const expected = perSlowKey * slowKeys + slowKeys + runs * claimLimit + claimLimit;
  const outstandingMs: number[] = [];
  for (let i = 0; i < runs; i++) {
    const [n, ms] = await timed(() => store.outstanding());
    if (n !== expected) throw new Error(`outstanding() = ${n}, expected ${expected}`);
    outstandingMs.push(ms);
  }
  const claimMs: number[] = [];
  for (let i = 0; i < runs; i++) {
    const [claimed, ms] = await timed(() => store.claim(claimLimit, 60_000));
    if (claimed.length !== claimLimit || claimed.some((c) => c.key !== null)) {
      throw new Error(`claim handed out ${claimed.map((c) => c.id).join(', ')}`);
    }
    claimMs.push(ms);
    for (const c of claimed) await store.delivered(c, 200);
  }
  const [skipped, skipMs] = await timed(() => store.skip('dead'));
  const { rows } = await sql<{ n: string }>`select count(*) as n from ${events}`.execute(db);
  console.log(
    `outbox with ${en(blocked)} blocked events (${en(behindDead)} behind one dead letter, ${en(perSlowKey)} behind each of ${slowKeys} retrying heads; ${en(Number(rows[0].n))} rows)`,
  );
  console.log(`  fill through enqueue(): ${(fillMs / 1000).toFixed(1)} s`);
  console.log(`  outstanding(): ${summary(outstandingMs)}`);
  console.log(`  claim(${claimLimit}): ${summary(claimMs)}`);
  console.log(`  deadLetter of a head with ${en(behindDead)} behind it: ${deadMs.toFixed(2)} ms`);
  console.log(
    `  skip() of that dead letter (the next event becomes the head): ${skipMs.toFixed(2)} ms (${skipped})`,
  );
} finally {
  await sql`drop schema if exists ${sql.id(schema)} cascade`.execute(db).catch(() => {});
  await store.close();
  await pool.end();
}
