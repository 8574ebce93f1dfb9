/**
 * Deferred mode, measured against real PostgreSQL. Two scenarios (SCENARIO):
 *
 * `slow` (the default; issue 41): the ledger example as a user runs it in deferred mode
 * (default pool and workers; its own process, bench/ledger-process.ts) with a slow handler
 * (HANDLER_DELAY_MS, 300). Every ROUND_MS (1000) for ROUNDS (20), IN_FLIGHT (40) deliveries
 * go at once, while the workers are busy with the rounds before. It reports the
 * acknowledgement latency, p50/p99, of each class of delivery, mixed in every round:
 *   - `new`: a new unordered event (202 pending);
 *   - `duplicate`: a redelivery of an event a worker is applying at that moment (202 pending,
 *     or 200 with the stored result once applied);
 *   - `ordered`: the next seqs of KEYS (8) ordered keys (202 pending or held), several seqs of
 *     a key at once (40%);
 * beside the workers' throughput (INLINE_EVENTS new unordered events IN_FLIGHT at a time, the
 * first acknowledgement to the last event applied) against inline mode's (the same app,
 * handler and load: there an acknowledgement is the application). At the end it checks what a user would: every event applied exactly
 * once, each key's events in seq order.
 *
 * `fast`: acknowledgement throughput of inline and deferred mode with a trivial handler
 * (EVENTS unique unordered events, CONCURRENCY connections), and the pickup latency (a pending
 * event's claim to its handler starting) at light load and during that run.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/deferred.ts
 *   SCENARIO=fast npx tsx bench/deferred.ts
 *
 * Environment, slow: HANDLER_DELAY_MS (300), IN_FLIGHT (40), ROUNDS (20), ROUND_MS (1000),
 * KEYS (8), INLINE_EVENTS (240), POOL_SIZE, ACK_POOL_SIZE and WORKERS (the
 * inbox's defaults when unset). Fast: EVENTS (4000), CONCURRENCY (32), POOL_SIZE (20), WORKERS (8),
 * LIGHT_EVENTS (300), WORKER_BATCH_SIZE (the inbox's default; 1 applies one event per
 * transaction). Results go to stdout and, for `slow`, bench/results/deferred-acks.json.
 */
import { fork } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { Agent } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import pg from 'pg';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import type { Handler } from '../src/index.js';
import { seededRandom } from '../src/testing/random.js';
import { postDelivery } from './post.js';

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

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

const round1 = (n: number) => Math.round(n * 10) / 10;

async function start(
  mode: 'inline' | 'deferred',
  options: {
    wrapHandler?: (handle: Handler) => Handler;
    handlerDelayMs?: number;
    poolSize?: number;
    ackPoolSize?: number;
    workers?: number;
    workerBatchSize?: number;
  },
): Promise<LedgerServer> {
  const schema = `${run}_${mode}`;
  schemas.push(schema, `${schema}_ledger`);
  return startLedger({
    ledgerSchema: `${schema}_ledger`,
    wrapHandler: options.wrapHandler,
    handlerDelayMs: options.handlerDelayMs,
    ingest: false,
    inbox: {
      db: url,
      schema,
      mode,
      poolSize: options.poolSize,
      ackPoolSize: mode === 'deferred' ? options.ackPoolSize : undefined,
      workers: options.workers,
      workerBatchSize: options.workerBatchSize,
    },
  });
}

async function appliedCount(app: LedgerServer, key = 'none'): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from ${sql.table(`${app.ledger.schema}.entries`)} where key = ${key}`.execute(
    await app.inbox.kysely(),
  );
  return Number(rows[0]?.n ?? 0);
}

/**
 * Resolves once the workers applied `target` entries in all. `inbox.idle()` is told by the
 * lanes themselves (no polling), and a count confirms; the table is read again only if the
 * lanes went idle short of it (a held event waiting for the sweeper, a retry's backoff).
 */
async function appliedAll(app: LedgerServer, target: number): Promise<void> {
  for (;;) {
    await app.inbox.idle();
    const { rows } = await sql<{ n: number }>`
      select count(*)::int as n from ${sql.table(`${app.ledger.schema}.entries`)}`.execute(
      await app.inbox.kysely(),
    );
    if (Number(rows[0]?.n ?? 0) >= target) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

type AckClass = 'new' | 'duplicate' | 'ordered';

/** The ledger in a child process (bench/ledger-process.ts), and what its handlers are doing. */
interface ChildLedger {
  readonly url: string;
  readonly options: { poolSize: number; ackPoolSize: number; workers: number };
  /** Events in a handler now. */
  readonly applying: Set<string>;
  call(cmd: 'idle' | 'close'): Promise<void>;
}

async function startChild(mode: 'inline' | 'deferred', options: object): Promise<ChildLedger> {
  const schema = `${run}_${mode}`;
  schemas.push(schema, `${schema}_ledger`);
  const child = fork(
    join(here, 'ledger-process.ts'),
    [
      JSON.stringify({
        ledgerSchema: `${schema}_ledger`,
        ingest: false,
        ...options,
        inbox: { db: url, schema, mode, logger: false, ...(options as { inbox?: object }).inbox },
      }),
    ],
    { execArgv: ['--import', 'tsx'], stdio: 'inherit' },
  );
  const applying = new Set<string>();
  const waiting = new Map<number, () => void>();
  let nextId = 0;
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`ledger process exited (${code})`)));
    child.on('message', (m: any) => {
      if (m.type === 'applying') applying.add(m.id);
      else if (m.type === 'applied') applying.delete(m.id);
      else if (m.type === 'done') {
        waiting.get(m.id)?.();
        waiting.delete(m.id);
      } else if (m.type === 'ready') {
        child.removeAllListeners('exit');
        resolve({
          url: m.url,
          options: m.options,
          applying,
          call: (cmd) =>
            new Promise<void>((done) => {
              const id = nextId++;
              waiting.set(id, done);
              child.send({ id, cmd });
            }),
        });
      }
    });
  });
}

async function countEntries(db: pg.Pool, mode: string, key?: string): Promise<number> {
  const { rows } = await db.query(
    `select count(*)::int as n from "${run}_${mode}_ledger".entries${key ? ' where key = $1' : ''}`,
    key ? [key] : [],
  );
  return Number(rows[0]?.n ?? 0);
}

/** Issue 41's scenario: a slow handler, deliveries of every class in flight at once. */
async function slow(): Promise<void> {
  const DELAY = int('HANDLER_DELAY_MS', 300);
  const IN_FLIGHT = int('IN_FLIGHT', 40);
  const ROUNDS = int('ROUNDS', 20);
  const ROUND_MS = int('ROUND_MS', 1000);
  const KEYS = int('KEYS', 8);
  const INLINE_EVENTS = int('INLINE_EVENTS', 240);
  const inbox = {
    poolSize: optionalInt('POOL_SIZE'),
    ackPoolSize: optionalInt('ACK_POOL_SIZE'),
    workers: optionalInt('WORKERS'),
  };
  const db = new pg.Pool({ connectionString: url, max: 2 });

  // Inline: an acknowledgement is the application; its rate is the throughput to match.
  const inline = await startChild('inline', {
    handlerDelayMs: DELAY,
    inbox: { poolSize: inbox.poolSize },
  });
  const inlineTarget = `${inline.url}/webhooks`;
  let next = 0;
  const inlineIds = Array.from({ length: INLINE_EVENTS }, (_, i) => `${run}-inline-${i}`);
  const inlineBegan = performance.now();
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < inlineIds.length) await post(inlineTarget, inlineIds[next++], '{"amount":1}');
    }),
  );
  const inlinePerSecond = INLINE_EVENTS / ((performance.now() - inlineBegan) / 1000);
  const inlineApplied = await countEntries(db, 'inline');
  await inline.call('close');

  // Deferred: which events a worker is applying now (a duplicate of one is the second class).
  const app = await startChild('deferred', { handlerDelayMs: DELAY, inbox });
  const { applying } = app;
  const target = `${app.url}/webhooks`;
  // Warm-up: connections and prepared statements, then nothing left to apply.
  await Promise.all(Array.from({ length: 10 }, (_, i) => post(target, `${run}-warm-${i}`, '{"amount":1}')));
  const appliedAll = async (n: number) => {
    for (;;) {
      await app.call('idle');
      if ((await countEntries(db, 'deferred')) >= n) return;
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  await appliedAll(10);

  // Rounds: IN_FLIGHT deliveries of every class at once (the issue's table: new events,
  // redeliveries of events the workers are applying, several seqs of each key), one round every
  // ROUND_MS, about what the workers apply meanwhile, so that they stay busy throughout.
  const perRound = { new: Math.round(IN_FLIGHT * 0.4), duplicate: Math.round(IN_FLIGHT * 0.2) };
  const orderedPerRound = IN_FLIGHT - perRound.new - perRound.duplicate;
  const latencies: Record<AckClass, number[]> = { new: [], duplicate: [], ordered: [] };
  const statuses: Record<AckClass, Map<number, number>> = {
    new: new Map(),
    duplicate: new Map(),
    ordered: new Map(),
  };
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
    // The classes interleaved in the burst (a seeded shuffle; a key's seqs stay in order), so
    // that none is measured at the burst's tail only.
    for (let i = sends.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [sends[i], sends[j]] = [sends[j] as (typeof sends)[number], sends[i] as (typeof sends)[number]];
    }
    const burst = sends.map(([kind, id, headers]) => send(kind, id, headers));
    await Promise.all(burst);
    const rest = ROUND_MS - (performance.now() - roundBegan);
    if (rest > 0) await new Promise((r) => setTimeout(r, rest));
  }
  const acked = performance.now();
  await appliedAll(10 + accepted.size);
  // Throughput: the inline run's events, IN_FLIGHT at a time, from the first acknowledgement to
  // the last event applied.
  const backlog = Array.from({ length: INLINE_EVENTS }, (_, i) => `${run}-backlog-${i}`);
  let nextBacklog = 0;
  const backlogBegan = performance.now();
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (nextBacklog < backlog.length) {
        const id = backlog[nextBacklog++];
        if ((await post(target, id, '{"amount":1}')) === 202) accepted.add(id);
      }
    }),
  );
  await appliedAll(10 + accepted.size);
  const deferredPerSecond = INLINE_EVENTS / ((performance.now() - backlogBegan) / 1000);

  // Exactly once, in order.
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
  await app.call('close');
  await db.end();

  const summary = (kind: AckClass) => {
    const sorted = [...latencies[kind]].sort((a, b) => a - b);
    return {
      deliveries: sorted.length,
      p50Ms: round1(percentile(sorted, 50)),
      p99Ms: round1(percentile(sorted, 99)),
      maxMs: round1(sorted.at(-1) ?? Number.NaN),
      statuses: Object.fromEntries(statuses[kind]),
    };
  };
  const result = {
    at: new Date().toISOString(),
    handlerDelayMs: DELAY,
    inFlight: IN_FLIGHT,
    ...app.options,
    acknowledgements: { new: summary('new'), duplicate: summary('duplicate'), ordered: summary('ordered') },
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
  for (const kind of ['new', 'duplicate', 'ordered'] as const) {
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

/** Fires `ids` at the app, CONCURRENCY at a time; returns acknowledgements per second. */
async function fire(
  app: LedgerServer,
  ids: string[],
  concurrency: number,
): Promise<{ perSecond: number; statuses: Map<number, number> }> {
  const target = `${app.url}/webhooks`;
  const statuses = new Map<number, number>();
  let next = 0;
  const began = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < ids.length) {
        const i = next++;
        const status = await post(target, ids[i], JSON.stringify({ amount: 1 }));
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    }),
  );
  return { perSecond: ids.length / ((performance.now() - began) / 1000), statuses };
}

/** Acknowledgement throughput and pickup latency with a trivial handler. */
async function fast(): Promise<void> {
  const EVENTS = int('EVENTS', 4000);
  const CONCURRENCY = int('CONCURRENCY', 32);
  const POOL_SIZE = int('POOL_SIZE', 20);
  const WORKERS = int('WORKERS', 8);
  const LIGHT_EVENTS = int('LIGHT_EVENTS', 300);
  const WORKER_BATCH_SIZE = optionalInt('WORKER_BATCH_SIZE');
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

  // Inline: acknowledgement = application.
  const inline = await start('inline', { poolSize: POOL_SIZE, workers: 0 });
  await fire(inline, ids('warm-inline', 300), CONCURRENCY);
  const inlineRun = await fire(inline, ids('inline', EVENTS), CONCURRENCY);
  await inline.close();

  // Deferred.
  const deferred = await start('deferred', {
    wrapHandler,
    poolSize: POOL_SIZE,
    workers: WORKERS,
    workerBatchSize: WORKER_BATCH_SIZE,
  });
  await fire(deferred, ids('warm-deferred', 300), CONCURRENCY);
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
  const deferredRun = await fire(deferred, ids('deferred', EVENTS), CONCURRENCY);
  await appliedAll(deferred, before + EVENTS);
  const drainedPerSecond = EVENTS / ((performance.now() - drainBegan) / 1000);
  const loaded = [...pickups].sort((a, b) => a - b);
  await deferred.close();

  console.log(
    `bench/deferred.ts fast — ${EVENTS} unique unordered events, ${CONCURRENCY} connections, pool ${POOL_SIZE}, ${WORKERS} workers, batches of ${WORKER_BATCH_SIZE ?? 'default'}`,
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
  if (SCENARIO === 'fast') await fast();
  else if (SCENARIO === 'slow') await slow();
  else throw new Error(`SCENARIO must be slow or fast; got ${JSON.stringify(SCENARIO)}`);
} finally {
  agent.destroy();
  const pool = new pg.Pool({ connectionString: url });
  await pool
    .query(`drop schema if exists ${schemas.map((s) => `"${s}"`).join(', ')} cascade`)
    .catch(() => {});
  await pool.end();
}
