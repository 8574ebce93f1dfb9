/**
 * Deferred mode against real PostgreSQL, two scenarios (SCENARIO):
 * - `slow` (the default): the ledger example in deferred mode, in a process of its own, with a
 *   slow handler. Every ROUND_MS, IN_FLIGHT deliveries at once while the workers are busy: the
 *   acknowledgement latency of new events, of redeliveries of events being applied and of
 *   ordered ones; the workers' throughput against inline mode's; exactly once, in seq order.
 * - `fast`: acknowledgements per second of inline and deferred mode with a trivial handler, and
 *   the pickup latency (a pending event's claim to its handler) at light load and under load.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/deferred.ts
 *   SCENARIO=fast npx tsx bench/deferred.ts
 *
 * Environment, slow: HANDLER_DELAY_MS (300), IN_FLIGHT (40), ROUNDS (20), ROUND_MS (1000),
 * KEYS (8), INLINE_EVENTS (240), POOL_SIZE, ACK_POOL_SIZE, WORKERS (the inbox's defaults).
 * Fast: EVENTS (4000), CONCURRENCY (32), POOL_SIZE (20), WORKERS (8), LIGHT_EVENTS (300),
 * WORKER_BATCH_SIZE, ACCOUNTS (1: every event credits one account, a row each handler locks; more
 * spread the events across that many). `fast` prints the CPU an event cost, Node (this process:
 * sender and server) and the PostgreSQL backends. `slow` also writes bench/results/deferred-acks.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { Agent } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import pg from 'pg';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import type { Handler } from '../src/index.js';
import { seededRandom } from '../src/testing/random.js';
import { dropSchemas } from './cleanup.js';
import { percentile, postDelivery } from './post.js';
import { postgresCpuMs, postgresCpuMsSince } from './process-cpu.js';
import { forkReady } from './server-process.js';
import { shuffle } from './workloads.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const int = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const optionalInt = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
const SCENARIO = process.env.SCENARIO ?? 'slow';
const run = `b${process.pid}`;
const schemas: string[] = [];
const here = dirname(fileURLToPath(import.meta.url));

const agent = new Agent({ keepAlive: true, maxSockets: 256 });

const post = (target: string, id: string, body: string, headers: Record<string, string> = {}) =>
  postDelivery(agent, target, id, body, headers);

const round1 = (n: number) => Math.round(n * 10) / 10;

/** Posts `ids` to `target`, `concurrency` at a time; acknowledgements per second, and the statuses. */
async function fire(
  target: string,
  ids: string[],
  concurrency: number,
  answered?: (id: string, status: number) => void,
  body: (i: number) => string = () => '{"amount":1}',
): Promise<{ perSecond: number; statuses: Map<number, number> }> {
  const statuses = new Map<number, number>();
  let next = 0;
  const began = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < ids.length) {
        const i = next++;
        const id = ids[i];
        const status = await post(target, id, body(i));
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        answered?.(id, status);
      }
    }),
  );
  return { perSecond: ids.length / ((performance.now() - began) / 1000), statuses };
}

/** The ledger in this process (`fast`). */
function start(
  mode: 'inline' | 'deferred',
  inbox: object,
  wrapHandler?: (h: Handler) => Handler,
): Promise<LedgerServer> {
  const schema = `${run}_${mode}`;
  schemas.push(schema, `${schema}_ledger`);
  return startLedger({
    ledgerSchema: `${schema}_ledger`,
    wrapHandler,
    ingest: false,
    inbox: { db: url, schema, mode, ...inbox },
  });
}

/** The ledger in a child process (`slow`), and the events in a handler there now. */
async function startChild(mode: 'inline' | 'deferred', handlerDelayMs: number, inbox: object) {
  const schema = `${run}_${mode}`;
  schemas.push(schema, `${schema}_ledger`);
  const ledger = { ledgerSchema: `${schema}_ledger`, ingest: false, handlerDelayMs };
  const child = await forkReady([
    JSON.stringify({ ...ledger, inbox: { db: url, schema, mode, logger: false, ...inbox } }),
  ]);
  const applying = new Set<string>();
  child.child.on('message', (m: any) => {
    if (m.type === 'applying') applying.add(m.id);
    else if (m.type === 'applied') applying.delete(m.id);
  });
  return { ...child, applying };
}

async function countEntries(db: pg.Pool, mode: string): Promise<number> {
  const { rows } = await db.query(`select count(*)::int as n from "${run}_${mode}_ledger".entries`);
  return Number(rows[0]?.n ?? 0);
}

/** Resolves once `count()` reaches `n`, counted each time the workers say they are idle. */
async function appliedAll(n: number, idle: () => Promise<unknown>, count: () => Promise<number>) {
  for (;;) {
    await idle();
    if ((await count()) >= n) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

const CLASSES = ['new', 'duplicate', 'ordered'] as const;
type AckClass = (typeof CLASSES)[number];

/** A slow handler, deliveries of every class in flight at once. */
async function slow(): Promise<void> {
  const DELAY = int('HANDLER_DELAY_MS', 300);
  const IN_FLIGHT = int('IN_FLIGHT', 40);
  const ROUNDS = int('ROUNDS', 20);
  const ROUND_MS = int('ROUND_MS', 1000);
  const KEYS = int('KEYS', 8);
  const INLINE_EVENTS = int('INLINE_EVENTS', 240);
  const [poolSize, ackPoolSize, workers] = ['POOL_SIZE', 'ACK_POOL_SIZE', 'WORKERS'].map(optionalInt);
  const inbox = { poolSize, ackPoolSize, workers };
  const db = new pg.Pool({ connectionString: url, max: 2 });

  // Inline: an acknowledgement is the application; its rate is the throughput to match.
  const inline = await startChild('inline', DELAY, { poolSize });
  const inlineIds = Array.from({ length: INLINE_EVENTS }, (_, i) => `${run}-inline-${i}`);
  const inlinePerSecond = (await fire(`${inline.ready.url}/webhooks`, inlineIds, IN_FLIGHT)).perSecond;
  const inlineApplied = await countEntries(db, 'inline');
  await inline.close();

  const app = await startChild('deferred', DELAY, inbox);
  const { applying } = app;
  const target = `${app.ready.url}/webhooks`;
  await Promise.all(Array.from({ length: 10 }, (_, i) => post(target, `${run}-warm-${i}`, '{"amount":1}')));
  const [idle, count] = [() => app.call('idle'), () => countEntries(db, 'deferred')];
  const applied = (n: number) => appliedAll(n, idle, count);
  await applied(10);

  // Rounds of every class, about what the workers apply meanwhile: they stay busy throughout.
  const perRound = { new: Math.round(IN_FLIGHT * 0.4), duplicate: Math.round(IN_FLIGHT * 0.2) };
  const orderedPerRound = IN_FLIGHT - perRound.new - perRound.duplicate;
  const perClass = <T>(make: (kind: AckClass) => T) =>
    Object.fromEntries(CLASSES.map((kind) => [kind, make(kind)])) as Record<AckClass, T>;
  const latencies = perClass((): number[] => []);
  const statuses = perClass(() => new Map<number, number>());
  const seqs = new Array<number>(KEYS).fill(0);
  const accepted = new Set<string>();
  /** The headers each event was sent with: its redelivery carries the same. */
  const sentWith = new Map<string, Record<string, string>>();
  let duplicatesOfApplying = 0;
  let nextKey = 0;
  const send = async (kind: AckClass, id: string, headers: Record<string, string>) => {
    sentWith.set(id, headers);
    const sent = performance.now();
    const status = await post(target, id, '{"amount":1}', headers);
    latencies[kind].push(performance.now() - sent);
    statuses[kind].set(status, (statuses[kind].get(status) ?? 0) + 1);
    if (status === 202 || status === 200) accepted.add(id);
  };
  const random = seededRandom(41);
  const began = performance.now();
  for (let round = 0; round < ROUNDS; round++) {
    const roundBegan = performance.now();
    const sends: Array<[AckClass, string, Record<string, string>]> = [];
    // Redeliveries of the events in a handler right now.
    const running = [...applying].filter((x) => accepted.has(x));
    for (let i = 0; i < perRound.duplicate; i++) {
      const id = running[i % Math.max(1, running.length)];
      if (id === undefined) {
        sends.push(['new', `${run}-r${round}-extra-${i}`, {}]);
        continue;
      }
      duplicatesOfApplying++;
      sends.push(['duplicate', id, sentWith.get(id) ?? {}]);
    }
    for (let i = 0; i < perRound.new; i++) sends.push(['new', `${run}-r${round}-new-${i}`, {}]);
    for (let i = 0; i < orderedPerRound; i++) {
      const k = nextKey++ % KEYS;
      const seq = ++seqs[k];
      sends.push(['ordered', `${run}-k${k}-${seq}`, { 'x-key': `${run}-k${k}`, 'x-seq': String(seq) }]);
    }
    // A seeded shuffle, so that no class is only the burst's tail.
    shuffle(sends, random);
    await Promise.all(sends.map(([kind, id, headers]) => send(kind, id, headers)));
    const rest = ROUND_MS - (performance.now() - roundBegan);
    if (rest > 0) await new Promise((r) => setTimeout(r, rest));
  }
  const acked = performance.now();
  await applied(10 + accepted.size);
  // Throughput: as many events as the inline run's, from the first acknowledgement to the last applied.
  const backlog = Array.from({ length: INLINE_EVENTS }, (_, i) => `${run}-backlog-${i}`);
  const backlogBegan = performance.now();
  await fire(target, backlog, IN_FLIGHT, (id, status) => status === 202 && accepted.add(id));
  await applied(10 + accepted.size);
  const deferredPerSecond = INLINE_EVENTS / ((performance.now() - backlogBegan) / 1000);

  const { rows } = await db.query<{ event_id: string; key: string; seq: string | null }>(
    `select event_id, key, seq from "${run}_deferred_ledger".entries order by n`,
  );
  const perId = new Map<string, number>();
  for (const r of rows) perId.set(r.event_id, (perId.get(r.event_id) ?? 0) + 1);
  const twice = [...perId.values()].filter((c) => c > 1).length;
  const missing = [...accepted].filter((id) => !perId.has(id)).length;
  let outOfOrder = 0;
  const lastSeq = new Map<string, number>();
  for (const r of rows) {
    if (r.seq === null) continue;
    const seq = Number(r.seq);
    // Increasing within a key (a seq answered 503 and not sent again leaves a gap, skipped).
    if (seq <= (lastSeq.get(r.key) ?? 0)) outOfOrder++;
    lastSeq.set(r.key, seq);
  }
  await app.close();
  await db.end();

  const summary = (kind: AckClass) => ({
    deliveries: latencies[kind].length,
    p50Ms: round1(percentile(latencies[kind], 50)),
    p99Ms: round1(percentile(latencies[kind], 99)),
    maxMs: round1(latencies[kind].length ? Math.max(...latencies[kind]) : Number.NaN),
    statuses: Object.fromEntries(statuses[kind]),
  });
  const result = {
    at: new Date().toISOString(),
    handlerDelayMs: DELAY,
    inFlight: IN_FLIGHT,
    ...app.ready.options,
    acknowledgements: perClass(summary),
    duplicatesOfEventsBeingApplied: duplicatesOfApplying,
    ackSeconds: round1((acked - began) / 1000),
    throughput: {
      inlinePerSecond: round1(inlinePerSecond),
      deferredAppliedPerSecond: round1(deferredPerSecond),
      ratio: Math.round((deferredPerSecond / inlinePerSecond) * 100) / 100,
    },
    rounds: ROUNDS,
    checks: {
      applied: rows.length - 10,
      accepted: accepted.size,
      appliedTwice: twice,
      missing,
      outOfOrder,
      inlineApplied,
    },
  };
  console.log(
    `bench/deferred.ts slow — handler ${DELAY} ms, ${IN_FLIGHT} in flight, pool ${result.poolSize} + ${result.ackPoolSize} for acknowledgements, ${result.workers} workers`,
  );
  for (const kind of CLASSES) {
    const s = result.acknowledgements[kind];
    console.log(
      `  ack ${kind.padEnd(9)} ${String(s.deliveries).padStart(4)}: p50 ${s.p50Ms} ms, p99 ${s.p99Ms} ms, max ${s.maxMs} ms ${JSON.stringify(s.statuses)}`,
    );
  }
  console.log(
    `  applied: deferred ${result.throughput.deferredAppliedPerSecond}/s vs inline ${result.throughput.inlinePerSecond}/s = ${result.throughput.ratio}×`,
  );
  console.log(`  checks: ${JSON.stringify(result.checks)}`);
  mkdirSync(join(here, 'results'), { recursive: true });
  writeFileSync(join(here, 'results', 'deferred-acks.json'), `${JSON.stringify(result, null, 2)}\n`);
}

/** Acknowledgement throughput and pickup latency with a trivial handler. */
async function fast(): Promise<void> {
  const EVENTS = int('EVENTS', 4000);
  const CONCURRENCY = int('CONCURRENCY', 32);
  const POOL_SIZE = int('POOL_SIZE', 20);
  const WORKERS = int('WORKERS', 8);
  const LIGHT_EVENTS = int('LIGHT_EVENTS', 300);
  const WORKER_BATCH_SIZE = optionalInt('WORKER_BATCH_SIZE');
  const ACCOUNTS = int('ACCOUNTS', 1);
  // One account is the ledger's `none`; more are providers' objects, each its own account.
  const body = (i: number) =>
    ACCOUNTS === 1
      ? '{"amount":1}'
      : JSON.stringify({ data: { object: { id: `account-${i % ACCOUNTS}`, amount: 1 } } });
  /** µs of CPU an event cost while `work` ran: Node (this process) and the PostgreSQL backends. */
  const cpuPerEvent = async (work: () => Promise<unknown>) => {
    const [node, postgres] = [process.cpuUsage(), postgresCpuMs()];
    await work();
    const { user, system } = process.cpuUsage(node);
    return { node: (user + system) / EVENTS, postgres: (postgresCpuMsSince(postgres) * 1000) / EVENTS };
  };
  const ids = (label: string, n: number) => Array.from({ length: n }, (_, i) => `${run}-${label}-${i}`);
  const fmt = (statuses: Map<number, number>) =>
    [...statuses].map(([status, count]) => `${status}×${count}`).join(' ');
  const pickups: number[] = [];
  const wrapHandler =
    (handle: Handler): Handler =>
    (event, ctx) => {
      pickups.push(Date.now() - event.receivedAt.getTime());
      return handle(event, ctx);
    };

  const inline = await start('inline', { poolSize: POOL_SIZE, workers: 0 });
  await fire(`${inline.url}/webhooks`, ids('warm-inline', 300), CONCURRENCY);
  let inlineRun = { perSecond: 0, statuses: new Map<number, number>() };
  const inlineCpu = await cpuPerEvent(async () => {
    inlineRun = await fire(`${inline.url}/webhooks`, ids('inline', EVENTS), CONCURRENCY, undefined, body);
  });
  await inline.close();

  const inbox = { poolSize: POOL_SIZE, workers: WORKERS, workerBatchSize: WORKER_BATCH_SIZE };
  const deferred = await start('deferred', inbox, wrapHandler);
  const target = `${deferred.url}/webhooks`;
  const entries = sql.table(`${deferred.ledger.schema}.entries`);
  const count = sql<{ n: number }>`select count(*)::int as n from ${entries}`;
  const applied = async () => Number((await count.execute(await deferred.inbox.kysely())).rows[0]?.n ?? 0);
  await fire(target, ids('warm-deferred', 300), CONCURRENCY);
  await deferred.inbox.idle();
  // Light load: one delivery at a time, each applied before the next.
  pickups.length = 0;
  for (const id of ids('light', LIGHT_EVENTS)) {
    await post(target, id, '{"amount":1}');
    await deferred.inbox.idle();
  }
  const light = [...pickups];
  // Under load: the throughput run, until the workers applied it all (idle, then counted).
  pickups.length = 0;
  const before = await applied();
  const drainBegan = performance.now();
  let deferredRun = { perSecond: 0, statuses: new Map<number, number>() };
  const deferredCpu = await cpuPerEvent(async () => {
    deferredRun = await fire(target, ids('deferred', EVENTS), CONCURRENCY, undefined, body);
    await appliedAll(before + EVENTS, () => deferred.inbox.idle(), applied);
  });
  const drainedPerSecond = EVENTS / ((performance.now() - drainBegan) / 1000);
  const loaded = [...pickups];
  await deferred.close();

  console.log(
    `bench/deferred.ts fast — ${EVENTS} unique unordered events on ${ACCOUNTS} account(s), ${CONCURRENCY} connections, pool ${POOL_SIZE}, ${WORKERS} workers, batches of ${WORKER_BATCH_SIZE ?? 'default'}`,
  );
  const cpu = (c: { node: number; postgres: number }) =>
    `${(c.node + c.postgres).toFixed(0)} µs (Node ${c.node.toFixed(0)} + PostgreSQL ${c.postgres.toFixed(0)})`;
  console.log(`inline   acknowledgements: ${inlineRun.perSecond.toFixed(0)}/s (${fmt(inlineRun.statuses)})`);
  console.log(
    `deferred acknowledgements: ${deferredRun.perSecond.toFixed(0)}/s (${fmt(deferredRun.statuses)}) = ${(deferredRun.perSecond / inlineRun.perSecond).toFixed(2)}× inline`,
  );
  console.log(
    `deferred applied (ack start → last applied): ${drainedPerSecond.toFixed(0)}/s = ${(drainedPerSecond / inlineRun.perSecond).toFixed(2)}× inline`,
  );
  console.log(
    `CPU per event: inline ${cpu(inlineCpu)}; deferred, acknowledged and applied, ${cpu(deferredCpu)}`,
  );
  console.log(
    `pickup latency, light load (${light.length} events): p50 ${percentile(light, 50)} ms, p99 ${percentile(light, 99)} ms, max ${Math.max(...light)} ms`,
  );
  console.log(
    `pickup latency, during the throughput run (${loaded.length} events, includes backlog): p50 ${percentile(loaded, 50)} ms, p99 ${percentile(loaded, 99)} ms`,
  );
}

try {
  if (SCENARIO === 'fast') await fast();
  else if (SCENARIO === 'slow') await slow();
  else throw new Error(`SCENARIO must be slow or fast; got ${JSON.stringify(SCENARIO)}`);
} finally {
  agent.destroy();
  await dropSchemas(url, schemas).catch(() => {});
}
