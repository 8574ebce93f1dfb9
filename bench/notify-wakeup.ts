/**
 * Wake-ups of other instances' workers, deferred mode (issue 44). A NOTIFY queued by a
 * transaction takes a cluster-wide lock at COMMIT, held through its WAL flush (it serialises
 * the commits of every notifying transaction), so a claim that announces each pending event in
 * its own commit bounds the cluster's acknowledgements by one flush at a time. Two variants, on
 * the same app, load and machine:
 *
 * - `after-commit`: what ships (migration 0004): the claim sends no NOTIFY; the instance that
 *   acknowledged sends one after commit, in a statement of its own, at most one per
 *   WAKE_UP_INTERVAL_MS (src/background/wake-ups.ts), naming every key stored meanwhile;
 * - `in-claim`: 0.2.0's claim, created again here: `pg_notify` inside the claim wherever it
 *   stores a runnable pending event, one NOTIFY per acknowledgement, sent at its COMMIT (the
 *   instance's coalesced wake-ups still run beside it).
 *
 * Two instances on one schema, so that the wake-up crosses processes' worth of machinery as
 * in production: A acknowledges (`workers: 0`, HTTP), B applies (`workers`, LISTEN, no HTTP).
 * Reported for each variant:
 * - pickup latency at light load (LIGHT_EVENTS deliveries one at a time, each applied before
 *   the next, then LIGHT_PAUSE_MS): from the claim (the event's `receivedAt`) to B's handler
 *   starting; B learns of the event only through the NOTIFY (its poll is 1 s). Deliveries
 *   closer together than the wake-up interval wait for its next NOTIFY, at most the interval;
 *   within one instance the lanes are woken in-process, at once, whatever the rate;
 * - under load (EVENTS unique unordered deliveries, CONCURRENCY at a time): acknowledgements
 *   per second, applied per second, and the notifications a LISTEN connection of the bench
 *   received per second while the acknowledgements ran: the notifying commits.
 *
 * Results go to stdout and bench/results/notify-wakeup.json. Run it on a quiet machine; never
 * in CI.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/notify-wakeup.ts
 *
 * Environment: EVENTS (10000), CONCURRENCY (64), LIGHT_EVENTS (200), LIGHT_PAUSE_MS (50),
 * WORKERS (8), ROUNDS (3,
 * alternating the variants so that drift on the machine hits both).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { Agent } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Ledger } from '../examples/ledger/ledger.js';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { WAKE_UP_INTERVAL_MS } from '../src/background/wake-ups.js';
import { claimFunction } from '../src/db/sql/claim.js';
import { notifyChannel } from '../src/db/sql/notify-pending.js';
import type { Tables } from '../src/db/sql/tables.js';
import { createInbox, type Handler } from '../src/index.js';
import { postDelivery } from './post.js';

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
const EVENTS = int('EVENTS', 10_000);
const CONCURRENCY = int('CONCURRENCY', 64);
const LIGHT_EVENTS = int('LIGHT_EVENTS', 200);
const LIGHT_PAUSE_MS = int('LIGHT_PAUSE_MS', 50);
const WORKERS = int('WORKERS', 8);
const ROUNDS = int('ROUNDS', 3);
const run = `nw${process.pid}`;
const here = dirname(fileURLToPath(import.meta.url));

type Variant = 'in-claim' | 'after-commit';

const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });

const post = (target: string, id: string, body: string) => postDelivery(agent, target, id, body);

/**
 * 0.2.0's claim: today's text with `pg_notify` back wherever it stores a runnable pending
 * event (an ordered one in its turn with its key, an unordered one with ''), as migration 0002
 * created it.
 */
function claimThatNotifies(t: Tables): string {
  const notify = (payload: string) =>
    `perform pg_notify('wi_' || md5('${t.schema}.${t.prefix}|' || p_source), ${payload});`;
  let added = 0;
  const text = claimFunction(t).replace(/( *)decision := 'pending';\n/g, (line, indent: string) => {
    added++;
    return `${line}${indent}${notify(added === 1 ? 'p_key' : "''")}\n`;
  });
  // Both places, or the variant would measure today's claim by another name.
  if (added !== 2) throw new Error(`in-claim: added ${added} pg_notify statements, not 2`);
  return text;
}

const percentile = (sorted: number[], p: number) =>
  sorted.length === 0
    ? Number.NaN
    : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

async function measure(variant: Variant, round: number) {
  const schema = `${run}_${variant.replace('-', '_')}_${round}`;
  const ledgerSchema = `${schema}_ledger`;
  // A: acknowledges only (no lanes, and no sweeper, whose pass would apply what it finds).
  const a: LedgerServer = await startLedger({
    ledgerSchema,
    ingest: false,
    inbox: { db: url, schema, mode: 'deferred', workers: 0, sweepIntervalMs: 0, logger: false },
  });
  // B: applies only, woken by NOTIFY (its poll is 1 s, the default).
  const ledger = new Ledger(ledgerSchema);
  const pickups: number[] = [];
  const waiters = new Map<string, () => void>();
  const handle: Handler = async (event, ctx) => {
    pickups.push(Date.now() - event.receivedAt.getTime());
    const result = await ledger.handle(event as never, ctx);
    waiters.get(event.id)?.();
    return result;
  };
  const b = createInbox({ db: url, schema, mode: 'deferred', workers: WORKERS, logger: false, handle });
  const listener = new pg.Client({ connectionString: url });
  const db = new pg.Pool({ connectionString: url, max: 2 });
  try {
    await b.ready();
    const tables = a.inbox.tables;
    if (variant === 'in-claim') await db.query(claimThatNotifies(tables));
    let notifications = 0;
    await listener.connect();
    listener.on('notification', () => notifications++);
    await listener.query(`listen ${notifyChannel(tables, a.inbox.options.source)}`);
    const target = `${a.url}/webhooks`;
    const applied = async () =>
      Number((await db.query(`select count(*)::int as n from "${ledgerSchema}".entries`)).rows[0].n);

    // Warm-up: connections, prepared statements.
    for (let i = 0; i < 50; i++) await post(target, `${schema}-warm-${i}`, '{"amount":1}');
    while ((await applied()) < 50) await new Promise((r) => setTimeout(r, 20));

    // Light load: one delivery at a time, applied by B before the next.
    pickups.length = 0;
    for (let i = 0; i < LIGHT_EVENTS; i++) {
      const id = `${schema}-light-${i}`;
      const done = new Promise<void>((resolve) => waiters.set(id, resolve));
      await post(target, id, '{"amount":1}');
      await done;
      waiters.delete(id);
      await new Promise((r) => setTimeout(r, LIGHT_PAUSE_MS));
    }
    const light = [...pickups].sort((x, y) => x - y);

    // Load.
    const before = await applied();
    pickups.length = 0;
    notifications = 0;
    const statuses = new Map<number, number>();
    let next = 0;
    const began = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < EVENTS) {
          const status = await post(target, `${schema}-${next++}`, '{"amount":1}');
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
        }
      }),
    );
    const ackSeconds = (performance.now() - began) / 1000;
    const notificationsWhileAcknowledging = notifications;
    while ((await applied()) < before + EVENTS) await new Promise((r) => setTimeout(r, 50));
    const appliedSeconds = (performance.now() - began) / 1000;
    return {
      variant,
      round,
      lightPickupMs: { p50: percentile(light, 50), p99: percentile(light, 99), max: light.at(-1) },
      acksPerSecond: Math.round(EVENTS / ackSeconds),
      appliedPerSecond: Math.round(EVENTS / appliedSeconds),
      notificationsPerSecond: Math.round(notificationsWhileAcknowledging / ackSeconds),
      statuses: Object.fromEntries(statuses),
    };
  } finally {
    await listener.end().catch(() => {});
    await b.close();
    await a.close();
    await db.query(
      `drop schema if exists "${schema}" cascade; drop schema if exists "${ledgerSchema}" cascade`,
    );
    await db.end();
  }
}

const results: Awaited<ReturnType<typeof measure>>[] = [];
for (let round = 1; round <= ROUNDS; round++) {
  // Alternate which variant goes first, so that a drifting machine does not favour one.
  const order: Variant[] = round % 2 === 1 ? ['in-claim', 'after-commit'] : ['after-commit', 'in-claim'];
  for (const variant of order.filter((v) => !process.env.ONLY || v === process.env.ONLY)) {
    const r = await measure(variant, round);
    results.push(r);
    console.log(
      `${variant.padEnd(12)} round ${round}: light-load pickup p50 ${r.lightPickupMs.p50} ms p99 ${r.lightPickupMs.p99} ms; ` +
        `${r.acksPerSecond} acks/s, ${r.appliedPerSecond} applied/s, ${r.notificationsPerSecond} NOTIFYs/s ${JSON.stringify(r.statuses)}`,
    );
  }
}
const median = (variant: Variant, pick: (r: (typeof results)[number]) => number) => {
  const values = results
    .filter((r) => r.variant === variant)
    .map(pick)
    .sort((x, y) => x - y);
  return values[Math.floor(values.length / 2)];
};
const summarize = (variant: Variant) => ({
  lightPickupP99Ms: median(variant, (r) => r.lightPickupMs.p99),
  acksPerSecond: median(variant, (r) => r.acksPerSecond),
  appliedPerSecond: median(variant, (r) => r.appliedPerSecond),
  notificationsPerSecond: median(variant, (r) => r.notificationsPerSecond),
});
const summary = {
  at: new Date().toISOString(),
  events: EVENTS,
  concurrency: CONCURRENCY,
  lightEvents: LIGHT_EVENTS,
  lightPauseMs: LIGHT_PAUSE_MS,
  workers: WORKERS,
  wakeUpIntervalMs: WAKE_UP_INTERVAL_MS,
  median: { afterCommit: summarize('after-commit'), inClaim: summarize('in-claim') },
  rounds: results,
};
console.log(JSON.stringify(summary.median));
mkdirSync(join(here, 'results'), { recursive: true });
writeFileSync(join(here, 'results', 'notify-wakeup.json'), `${JSON.stringify(summary, null, 2)}\n`);
agent.destroy();
