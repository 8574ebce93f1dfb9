/**
 * NOTIFY and commit contention, deferred mode. A NOTIFY queued by a transaction takes a
 * database-wide lock at COMMIT (it serialises the commits of every notifying transaction), so
 * the claim that announces each pending event in its own commit may cap deferred
 * acknowledgements. This measures the two ways of waking the workers, on the same app, load
 * and machine:
 *
 * - `in-claim`: today's design: the claim function NOTIFYs when it stores a pending event
 *   (src/sql/notify-pending.ts); no round trip, one NOTIFY per commit.
 * - `after-commit`: the claim created again without its NOTIFY; after a delivery is answered 202 (its claim
 *   committed), one `select pg_notify(channel, '')` in autocommit, coalesced: at most one per
 *   COALESCE_MS per instance, however many events were stored meanwhile. This is what the
 *   inbox would do in-process after COMMIT; here the bench sends it (same connection pool
 *   sizes, one extra connection) so that the library does not need a switch to be measured.
 *
 * Reports, for each: acknowledgements per second (202s), and applied per second (first
 * delivery to the last event applied by the workers), with the p50/p99 pickup latency.
 * Results go to stdout and bench/results/notify-wakeup.json. The lead runs it on a quiet
 * machine; never in CI.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/notify-wakeup.ts
 *
 * Environment: EVENTS (20000), CONCURRENCY (64), POOL_SIZE (20), WORKERS (8), COALESCE_MS (5),
 * ROUNDS (3, alternating the variants so that drift on the machine hits both).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import type { Handler } from '../src/index.js';
import { claimFunction } from '../src/sql/claim.js';
import { notifyChannel } from '../src/sql/notify-pending.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const int = (name: string, fallback: number) => {
  const raw = process.env[name];
  const n = raw === undefined ? fallback : Number(raw);
  if (!Number.isSafeInteger(n) || n < 1) {
    console.error(`${name} must be a positive integer; got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return n;
};
const EVENTS = int('EVENTS', 20_000);
const CONCURRENCY = int('CONCURRENCY', 64);
const POOL_SIZE = int('POOL_SIZE', 20);
const WORKERS = int('WORKERS', 8);
const COALESCE_MS = int('COALESCE_MS', 5);
const ROUNDS = int('ROUNDS', 3);
const run = `nw${process.pid}`;
const here = dirname(fileURLToPath(import.meta.url));

type Variant = 'in-claim' | 'after-commit';

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

/** At most one NOTIFY per `everyMs`, sent after the commits that asked for it. */
function coalescedNotifier(pool: pg.Pool, channel: string, everyMs: number) {
  let scheduled = false;
  let sent = 0;
  return {
    wake() {
      if (scheduled) return;
      scheduled = true;
      setTimeout(() => {
        scheduled = false;
        sent++;
        pool.query('select pg_notify($1, $2)', [channel, '']).catch(() => {});
      }, everyMs);
    },
    get sent() {
      return sent;
    },
  };
}

const percentile = (sorted: number[], p: number) =>
  sorted.length === 0
    ? Number.NaN
    : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

async function measure(variant: Variant, round: number) {
  const schema = `${run}_${variant.replace('-', '_')}_${round}`;
  const pickups: number[] = [];
  const wrapHandler =
    (handle: Handler): Handler =>
    (event, ctx) => {
      pickups.push(Date.now() - event.receivedAt.getTime());
      return handle(event, ctx);
    };
  const app: LedgerServer = await startLedger({
    ledgerSchema: `${schema}_ledger`,
    wrapHandler,
    inbox: { db: url, schema, mode: 'deferred', poolSize: POOL_SIZE, workers: WORKERS },
  });
  const notifyPool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    const db = await app.inbox.kysely();
    let notifier: ReturnType<typeof coalescedNotifier> | undefined;
    if (variant === 'after-commit') {
      // The claim as it ships, without its two `pg_notify` statements (src/sql/notify-pending.ts).
      let removed = 0;
      const silent = claimFunction(app.inbox.tables).replace(/perform pg_notify\(.*\);/g, () => {
        removed++;
        return 'null;';
      });
      // Both of the claim's NOTIFYs, or the variant would measure the shipped claim by another name.
      if (removed !== 2) throw new Error(`after-commit: removed ${removed} pg_notify statements, not 2`);
      await runSql(url, silent);
      notifier = coalescedNotifier(
        notifyPool,
        notifyChannel(app.inbox.tables, app.inbox.options.source),
        COALESCE_MS,
      );
    }
    const target = `${app.url}/webhooks`;
    // Warm-up: connections, prepared statements, JIT.
    for (let i = 0; i < 200; i++) await post(target, `${schema}-warm-${i}`, '{"amount":1}');
    await app.inbox.idle();
    const applied = async () => (await app.ledger.account(db, 'none')).entries.length;
    const before = await applied();
    pickups.length = 0;
    const statuses = new Map<number, number>();
    let next = 0;
    const began = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < EVENTS) {
          const status = await post(target, `${schema}-${next++}`, '{"amount":1}');
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
          if (status === 202) notifier?.wake();
        }
      }),
    );
    const ackSeconds = (performance.now() - began) / 1000;
    while ((await applied()) < before + EVENTS) await new Promise((r) => setTimeout(r, 20));
    const appliedSeconds = (performance.now() - began) / 1000;
    const sorted = [...pickups].sort((a, b) => a - b);
    return {
      variant,
      round,
      acksPerSecond: Math.round(EVENTS / ackSeconds),
      appliedPerSecond: Math.round(EVENTS / appliedSeconds),
      pickupMs: { p50: percentile(sorted, 50), p99: percentile(sorted, 99) },
      statuses: Object.fromEntries(statuses),
      notifies: variant === 'in-claim' ? EVENTS : (notifier?.sent ?? 0),
    };
  } finally {
    await app.close();
    await notifyPool.end();
    await runSql(
      url,
      `drop schema if exists "${schema}" cascade; drop schema if exists "${schema}_ledger" cascade`,
    );
  }
}

async function runSql(connectionString: string, text: string): Promise<void> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

const results: Awaited<ReturnType<typeof measure>>[] = [];
for (let round = 1; round <= ROUNDS; round++) {
  // Alternate which variant goes first, so that a drifting machine does not favour one.
  const order: Variant[] = round % 2 === 1 ? ['in-claim', 'after-commit'] : ['after-commit', 'in-claim'];
  for (const variant of order) {
    const r = await measure(variant, round);
    results.push(r);
    console.log(
      `${variant.padEnd(12)} round ${round}: ${r.acksPerSecond} acks/s, ${r.appliedPerSecond} applied/s, ` +
        `pickup p50 ${r.pickupMs.p50} ms p99 ${r.pickupMs.p99} ms, ${r.notifies} NOTIFYs ${JSON.stringify(r.statuses)}`,
    );
  }
}
const median = (variant: Variant, field: 'acksPerSecond' | 'appliedPerSecond') => {
  const values = results
    .filter((r) => r.variant === variant)
    .map((r) => r[field])
    .sort((a, b) => a - b);
  return values[Math.floor(values.length / 2)];
};
const summary = {
  at: new Date().toISOString(),
  events: EVENTS,
  concurrency: CONCURRENCY,
  poolSize: POOL_SIZE,
  workers: WORKERS,
  coalesceMs: COALESCE_MS,
  median: {
    inClaim: {
      acksPerSecond: median('in-claim', 'acksPerSecond'),
      appliedPerSecond: median('in-claim', 'appliedPerSecond'),
    },
    afterCommit: {
      acksPerSecond: median('after-commit', 'acksPerSecond'),
      appliedPerSecond: median('after-commit', 'appliedPerSecond'),
    },
  },
  rounds: results,
};
console.log(JSON.stringify(summary.median));
mkdirSync(join(here, 'results'), { recursive: true });
writeFileSync(join(here, 'results', 'notify-wakeup.json'), `${JSON.stringify(summary, null, 2)}\n`);
agent.destroy();
