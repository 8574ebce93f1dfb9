/**
 * Deferred mode, measured in one run against real PostgreSQL:
 * - acknowledgement throughput of the ledger in inline mode and in deferred mode (same app,
 *   same handler, same load: unique unordered events, C concurrent keep-alive connections);
 * - pickup latency in deferred mode: from the pending event's claim to its handler starting
 *   (event.receivedAt is the claim transaction's now(); the claim commits ~1 ms later, so this
 *   is an upper bound of commit → application), at light load (one delivery at a time) and
 *   during the throughput run (where it includes the backlog the workers had to catch up on).
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/deferred.ts
 *
 * Environment: EVENTS (4000), CONCURRENCY (32), POOL_SIZE (20), WORKERS (8), LIGHT_EVENTS (300),
 * WORKER_BATCH_SIZE (the inbox's default; 1 applies one event per transaction).
 */
import { Agent, request } from 'node:http';
import { sql } from 'kysely';
import pg from 'pg';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import type { Handler } from '../src/index.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const int = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const EVENTS = int('EVENTS', 4000);
const CONCURRENCY = int('CONCURRENCY', 32);
const POOL_SIZE = int('POOL_SIZE', 20);
const WORKERS = int('WORKERS', 8);
const LIGHT_EVENTS = int('LIGHT_EVENTS', 300);
const WORKER_BATCH_SIZE = process.env.WORKER_BATCH_SIZE ? Number(process.env.WORKER_BATCH_SIZE) : undefined;
const run = `b${process.pid}`;
const schemas: string[] = [];

const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });

function post(target: string, id: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      target,
      {
        method: 'POST',
        agent,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          'idempotency-key': id,
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function start(mode: 'inline' | 'deferred', pickups: number[]): Promise<LedgerServer> {
  const schema = `${run}_${mode}`;
  schemas.push(schema, `${schema}_ledger`);
  const wrapHandler = (handle: Handler): Handler => {
    return (event, ctx) => {
      pickups.push(Date.now() - event.receivedAt.getTime());
      return handle(event, ctx);
    };
  };
  return startLedger({
    ledgerSchema: `${schema}_ledger`,
    wrapHandler,
    inbox: {
      db: url,
      schema,
      mode,
      poolSize: POOL_SIZE,
      workers: mode === 'deferred' ? WORKERS : 0,
      workerBatchSize: WORKER_BATCH_SIZE,
    },
  });
}

/** Fires `ids` at the app, CONCURRENCY at a time; returns acknowledgements per second. */
async function fire(
  app: LedgerServer,
  ids: string[],
): Promise<{ perSecond: number; statuses: Map<number, number> }> {
  const target = `${app.url}/webhooks`;
  const statuses = new Map<number, number>();
  let next = 0;
  const began = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < ids.length) {
        const i = next++;
        const status = await post(target, ids[i], JSON.stringify({ amount: 1 }));
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    }),
  );
  return { perSecond: ids.length / ((performance.now() - began) / 1000), statuses };
}

/** The ledger entries of account 'none' (what the workers applied): one count(*), not the rows. */
async function appliedCount(app: LedgerServer): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from ${sql.table(`${app.ledger.schema}.entries`)} where key = 'none'`.execute(
    await app.inbox.kysely(),
  );
  return Number(rows[0]?.n ?? 0);
}

/**
 * Resolves once the workers applied `target` entries. `inbox.idle()` is told by the lanes
 * themselves (no polling), and a count confirms; the table is read again only if the lanes
 * went idle short of it (a retry waiting for its backoff). Reading the entries every 20 ms
 * while the workers ran took CPU from them: the bench measured its own polling.
 */
async function appliedAll(app: LedgerServer, target: number): Promise<void> {
  for (;;) {
    await app.inbox.idle();
    if ((await appliedCount(app)) >= target) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function main() {
  const ids = (label: string, n: number) => Array.from({ length: n }, (_, i) => `${run}-${label}-${i}`);
  const fmt = (statuses: Map<number, number>) =>
    [...statuses].map(([status, count]) => `${status}×${count}`).join(' ');

  // Inline: acknowledgement = application.
  const inline = await start('inline', []);
  await fire(inline, ids('warm-inline', 300));
  const inlineRun = await fire(inline, ids('inline', EVENTS));
  await inline.close();

  // Deferred.
  const pickups: number[] = [];
  const deferred = await start('deferred', pickups);
  await fire(deferred, ids('warm-deferred', 300));
  await deferred.inbox.idle();
  // Light load: one delivery at a time, waiting for its application before the next.
  pickups.length = 0;
  for (const id of ids('light', LIGHT_EVENTS)) {
    await post(`${deferred.url}/webhooks`, id, JSON.stringify({ amount: 1 }));
    await deferred.inbox.idle();
  }
  const light = [...pickups].sort((a, b) => a - b);
  // Saturation: the throughput run.
  pickups.length = 0;
  const before = await appliedCount(deferred);
  const drainBegan = performance.now();
  const deferredRun = await fire(deferred, ids('deferred', EVENTS));
  await appliedAll(deferred, before + EVENTS);
  const drainedPerSecond = EVENTS / ((performance.now() - drainBegan) / 1000);
  const loaded = [...pickups].sort((a, b) => a - b);
  await deferred.close();

  console.log(
    `bench/deferred.ts — ${EVENTS} unique unordered events, ${CONCURRENCY} connections, pool ${POOL_SIZE}, ${WORKERS} workers, batches of ${WORKER_BATCH_SIZE ?? 'default'}`,
  );
  console.log(`inline   acknowledgements: ${inlineRun.perSecond.toFixed(0)}/s (${fmt(inlineRun.statuses)})`);
  console.log(
    `deferred acknowledgements: ${deferredRun.perSecond.toFixed(0)}/s (${fmt(deferredRun.statuses)}) = ${(deferredRun.perSecond / inlineRun.perSecond).toFixed(2)}× inline`,
  );
  console.log(`deferred applied (ack start → last applied): ${drainedPerSecond.toFixed(0)}/s`);
  console.log(
    `pickup latency, light load (${light.length} events): p50 ${percentile(light, 50)} ms, p99 ${percentile(light, 99)} ms, max ${light.at(-1)} ms`,
  );
  console.log(
    `pickup latency, during the throughput run (${loaded.length} events, includes backlog): p50 ${percentile(loaded, 50)} ms, p99 ${percentile(loaded, 99)} ms`,
  );
}

try {
  await main();
} finally {
  agent.destroy();
  const pool = new pg.Pool({ connectionString: url });
  await pool
    .query(`drop schema if exists ${schemas.map((s) => `"${s}"`).join(', ')} cascade`)
    .catch(() => {});
  await pool.end();
}
