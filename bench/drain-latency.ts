/**
 * Drain latency and round trips of ordered deliveries, on real Postgres, over HTTP (the ledger
 * example on Express, port 0).
 *
 *   npx tsx bench/drain-latency.ts [samples=500] [concurrency=1,8]
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test (the default)
 *
 * Drain latency: for one key, seq 2 is delivered (held, 202), then seq 1 (the gap-filling
 * delivery, 200). The latency is the time from the COMMIT of seq 1's transaction to the COMMIT
 * of seq 2's. Seq 1's delivery applies seq 2 in its own transaction (src/background/drain.ts),
 * so the two are one COMMIT and the latency is 0; it measures something again when that
 * changes. Both are timed where the inbox sees them: a pool wrapper stamps the moment Postgres
 * acknowledges each COMMIT, and knows which events each transaction applied (from the claim's
 * parameters and each take_next's result). Reported as p50/p99 over `samples` keys, sent
 * `concurrency` keys at a time.
 *
 * Round trips: the same wrapper counts every statement, per kind of delivery.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import pg from 'pg';
import { startLedger } from '../examples/ledger/start.js';
import type { PgClientLike, PgPoolLike } from '../src/index.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const samples = Number(process.argv[2] ?? 500);
const concurrencies = (process.argv[3] ?? '1,8').split(',').map(Number);

/** A pg.Pool that counts statements and stamps, per event id, when its transaction committed. */
class StampingPool implements PgPoolLike {
  readonly pool = new pg.Pool({ connectionString: url, max: 20 });
  statements = 0;
  readonly committedAt = new Map<string, number>();
  /** When the transaction that applied the event sent its BEGIN. */
  readonly beganAt = new Map<string, number>();
  constructor() {
    this.pool.on('error', () => {});
  }
  async connect(): Promise<PgClientLike> {
    const client = await this.pool.connect();
    // The events the open transaction applies: the claim's, then each take_next's.
    let applying: string[] = [];
    let began = 0;
    return {
      query: async (config) => {
        this.statements++;
        const text = config.text;
        // BEGIN rides on the claim or take_next (src/db/drivers/pg.ts), their values as literals.
        if (text.startsWith('begin')) began = performance.now();
        const claimed = /"claim"\('(?:[^']|'')*', '((?:[^']|'')*)'/.exec(text);
        if (claimed) applying.push(claimed[1].replace(/''/g, "'"));
        const answer: any = await client.query(config as pg.QueryConfig);
        // Several statements answer a list of results: take_next's is the one with a `more` column
        // (a SAVEPOINT follows it).
        const results: pg.QueryResult[] = Array.isArray(answer) ? answer : [answer];
        const tookRows = /"take_next"\(/.test(text)
          ? results.find((r) => r.fields?.some((f) => f.name === 'more'))?.rows
          : undefined;
        const took: string | undefined = tookRows?.[0]?.id;
        if (took !== undefined) applying.push(took);
        if (/(^|; )commit$/.test(text)) {
          const at = performance.now();
          for (const id of applying) {
            this.committedAt.set(id, at);
            this.beganAt.set(id, began);
          }
          applying = [];
        } else if (text === 'rollback') applying = [];
        return answer;
      },
      release: (err) => client.release(err as any),
    };
  }
  get totalCount() {
    return this.pool.totalCount;
  }
  get idleCount() {
    return this.pool.idleCount;
  }
  get waitingCount() {
    return this.pool.waitingCount;
  }
  end() {
    return this.pool.end();
  }
}

const agent = { keepalive: true } as const;
async function post(base: string, key: string, seq: number): Promise<number> {
  const res = await fetch(`${base}/webhooks`, {
    ...agent,
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'idempotency-key': `${key}:${seq}`,
      'x-key': key,
      'x-seq': String(seq),
    },
    body: JSON.stringify({ amount: seq }),
  });
  await res.arrayBuffer();
  return res.status;
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

const run = randomBytes(3).toString('hex');
const schema = `bench_drain_${run}`;
const ledgerSchema = `bench_ledger_${run}`;
const pool = new StampingPool();
const app = await startLedger({ ledgerSchema, inbox: { db: pool, schema, sweepIntervalMs: 0 } });

try {
  // Warm up: prepare the named statements on the pool's connections.
  for (let i = 0; i < 200; i++) {
    const key = `warm-${i}`;
    await post(app.url, key, 2);
    await post(app.url, key, 1);
  }
  await app.inbox.idle();
  await sql.raw(`analyze "${schema}".events`).execute(await app.inbox.kysely());

  // Round trips, per kind of delivery, one at a time.
  const count = async (label: string, send: (i: number) => Promise<unknown>, n = 200) => {
    await app.inbox.idle();
    const before = pool.statements;
    for (let i = 0; i < n; i++) await send(i);
    await app.inbox.idle();
    const perDelivery = (pool.statements - before) / n;
    console.log(`round trips  ${label.padEnd(58)} ${perDelivery.toFixed(2)}`);
    return perDelivery;
  };
  const inTurn = await count('ordered, in turn (seq 1 of a new key), applied', (i) =>
    post(app.url, `rt-a-${i}`, 1),
  );
  await count('ordered, ahead (seq 2), held: 202', (i) => post(app.url, `rt-b-${i}`, 2));
  const fill = await count('ordered, gap-filling (seq 1), applied + drain of 1 held', (i) =>
    post(app.url, `rt-b-${i}`, 1),
  );
  await count('duplicate of an applied ordered event', (i) => post(app.url, `rt-a-${i}`, 1));
  console.log(`round trips  ${'drain, per held event applied'.padEnd(58)} ${(fill - inTurn).toFixed(2)}`);
  console.log('             (the ledger handler itself sends 2 statements and returns a result)');

  for (const concurrency of concurrencies) {
    const latencies: number[] = [];
    const fillTransactions: number[] = [];
    let next = 0;
    const lane = async () => {
      while (next < samples) {
        const key = `lat-${concurrency}-${next++}`;
        if ((await post(app.url, key, 2)) !== 202) throw new Error('seq 2 was not held');
        if ((await post(app.url, key, 1)) !== 200) throw new Error('seq 1 was not applied');
      }
    };
    await Promise.all(Array.from({ length: concurrency }, lane));
    await app.inbox.idle();
    for (let i = 0; i < samples; i++) {
      const key = `lat-${concurrency}-${i}`;
      const fillAt = pool.committedAt.get(`${key}:1`);
      const heldAt = pool.committedAt.get(`${key}:2`);
      if (fillAt === undefined || heldAt === undefined) throw new Error(`no commit seen for ${key}`);
      latencies.push(heldAt - fillAt);
      fillTransactions.push(fillAt - pool.beganAt.get(`${key}:1`)!);
    }
    const show = (label: string, values: number[]) => {
      values.sort((a, b) => a - b);
      console.log(
        `${label.padEnd(44)} p50 ${percentile(values, 50).toFixed(2)} ms, ` +
          `p99 ${percentile(values, 99).toFixed(2)} ms, max ${values.at(-1)!.toFixed(2)} ms`,
      );
    };
    console.log(`drain latency, ${samples} keys, ${concurrency} at a time:`);
    show('  commit of seq 1 -> commit of held seq 2', latencies);
    show("  for scale: seq 1's transaction (seq 2's too)", fillTransactions);
  }
} finally {
  await app.close();
  const cleanup = new pg.Client({ connectionString: url });
  await cleanup.connect();
  await cleanup.query(`drop schema if exists "${schema}", "${ledgerSchema}" cascade`);
  await cleanup.end();
  await pool.end().catch(() => {});
}
