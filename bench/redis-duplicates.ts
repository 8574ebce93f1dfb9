/**
 * Duplicates of events another instance processed (in-process LRU off), answered by Postgres
 * alone vs through the Redis fast path, on real Postgres and Redis:
 *   npx tsx bench/redis-duplicates.ts   (N=3000 by default; DATABASE_URL, REDIS_URL honoured)
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { createInbox } from '../src/index.js';
import { CountingPool } from '../test/support/counting-pool.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const schema = `wi_dupbench_${process.pid}`;
const prefix = `dupbench-${process.pid}:`;
const N = Number(process.env.N ?? 3000);
const C = 20;
const ids = Array.from({ length: 200 }, (_, i) => `e${i}`);
const delivery = (id: string) => ({
  headers: { 'idempotency-key': id, 'content-type': 'application/json' },
  rawBody: Buffer.from('{"amount":1}'),
});
const seed = createInbox({
  db: url,
  schema,
  sweepIntervalMs: 0,
  redis: redisUrl,
  redisPrefix: prefix,
  handle: async () => ({ ok: true }),
});
for (const id of ids) await seed.receive(delivery(id));
await seed.idle();
await seed.close();
const admin = new pg.Client(url);
await admin.connect();
await admin.query(`analyze "${schema}".events`);
for (const mode of ['postgres', 'redis', 'postgres', 'redis']) {
  const pool = new CountingPool(url);
  const inbox = createInbox({
    db: pool,
    schema,
    sweepIntervalMs: 0,
    duplicateCacheSize: 0,
    ...(mode === 'redis' ? { redis: redisUrl, redisPrefix: prefix } : {}),
    handle: async () => ({ ok: true }),
  });
  await inbox.ready();
  await inbox.receive(delivery(ids[0]));
  pool.reset();
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: C }, async () => {
      while (next < N) {
        const o = await inbox.receive(delivery(ids[next++ % ids.length]));
        if (o.kind !== 'duplicate') throw new Error(o.kind);
      }
    }),
  );
  const s = (performance.now() - t0) / 1000;
  console.log(
    `${mode.padEnd(8)} ${N} duplicates, concurrency ${C}: ${(N / s).toFixed(0)}/s, Postgres statements per duplicate ${(pool.reset().length / N).toFixed(2)}`,
  );
  await inbox.close();
  await pool.end();
}
await admin.query(`drop schema "${schema}" cascade`);
await admin.end();
// The Redis entries this run wrote.
const redis = new Redis(redisUrl);
const keys = await redis.keys(`${prefix}*`);
if (keys.length) await redis.del(...keys);
await redis.quit();
