/**
 * CPU per delivery of each way our drivers send statements (src/db/drivers/README.md): this
 * process's plus its PostgreSQL backends' (from /proc), for new events and for duplicates,
 * through `inbox.receive` (no HTTP, no in-process cache). Each configuration (`pg`: a pg.Pool;
 * `pglite`: in memory; `kysely`: the user's Kysely over a pg.Pool) runs in a process of its
 * own, alternating ROUNDS times; `config@script` runs another build (another commit's).
 *
 *   npx tsc -p tsconfig.bench.json && node .tmp/bench-build/bench/wire-cost.js pg pglite kysely
 *   N=3000 ROUNDS=3 CONCURRENCY=10 node .tmp/bench-build/bench/wire-cost.js pg kysely
 *   node .tmp/bench-build/bench/wire-cost.js pg pg@/tmp/before/.tmp/bench-build/bench/wire-cost.js
 */
import { fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { Ledger } from '../examples/ledger/ledger.js';
import { createInbox, type InboxEvent } from '../src/index.js';
import { processCpuMs } from './process-cpu.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
function positiveInteger(name: string, fallback: number): number {
  const text = process.env[name];
  if (text === undefined) return fallback;
  if (!/^[1-9]\d*$/.test(text)) throw new Error(`${name} must be a positive integer, got ${text}`);
  return Number(text);
}
const N = positiveInteger('N', 3000);
const ROUNDS = positiveInteger('ROUNDS', 3);
const CONCURRENCY = positiveInteger('CONCURRENCY', 10);
const CONFIGS = ['pg', 'pglite', 'kysely'];

interface Measured {
  unique: number;
  duplicate: number;
}

/** One configuration, in this process: CPU per delivery, ms, for each workload. */
async function measure(config: string): Promise<Measured> {
  const run = `wire_${process.pid}`;
  const app = `wire-cost-${process.pid}`;
  const connectionString = `${url}${url.includes('?') ? '&' : '?'}application_name=${app}`;
  const pool = new pg.Pool({ connectionString, max: CONCURRENCY });
  const ledger = new Ledger(`${run}_ledger`);
  const db =
    config === 'pglite'
      ? 'memory'
      : config === 'kysely'
        ? new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
        : pool;
  const inbox = createInbox({
    db,
    schema: `${run}_inbox`,
    duplicateCacheSize: 0,
    sweepIntervalMs: 0,
    handle: (event: InboxEvent<{ account: string; amount: number }>, context) =>
      ledger.handle({ ...event, key: event.body.account }, context),
  });
  const kysely = await inbox.kysely();
  await ledger.setup(kysely);
  const observer = new pg.Client({ connectionString: url });
  await observer.connect();
  const backends = async () => {
    if (config === 'pglite') return [];
    const sessions = 'select pid from pg_stat_activity where application_name = $1';
    return (await observer.query<{ pid: number }>(sessions, [app])).rows.map((row) => row.pid);
  };
  /** Event `k` of a prefix: its duplicates have its id and body. */
  const deliver = (prefix: string, k: number) =>
    inbox
      .receive({
        headers: { 'idempotency-key': `${prefix}-${k}`, 'content-type': 'application/json' },
        rawBody: Buffer.from(`{"account":"a${k % 1000}","amount":1}`),
      })
      .then((outcome) => {
        if (outcome.status !== 200) throw new Error(`${config}: ${prefix}-${k} answered ${outcome.status}`);
      });
  /** `count` deliveries, CONCURRENCY at once: the nth is event `eventOf(n)` of `prefix`. */
  const send = async (count: number, prefix: string, eventOf: (n: number) => number) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < count) await deliver(prefix, eventOf(next++));
      }),
    );
  };
  /** CPU per delivery of `count` deliveries, ms: this process and the backends serving it. */
  const cpuPerDelivery = async (count: number, prefix: string, eventOf: (n: number) => number) => {
    const pids = await backends();
    const before = new Map(pids.map((pid) => [pid, processCpuMs(pid)]));
    const node = process.cpuUsage();
    await send(count, prefix, eventOf);
    const used = process.cpuUsage(node);
    let postgres = 0;
    for (const pid of new Set([...pids, ...(await backends())]))
      postgres += Math.max(0, processCpuMs(pid) - (before.get(pid) ?? 0));
    return ((used.user + used.system) / 1000 + postgres) / count;
  };
  const random = (n: number) => Math.floor(Math.random() * n);
  try {
    await send(1000, 'warm', (n) => n);
    await send(1000, 'warm', () => random(1000));
    await sql`analyze ${sql.table(`${run}_inbox.events`)}`.execute(kysely);
    const unique = await cpuPerDelivery(N, 'u', (n) => n);
    const duplicate = await cpuPerDelivery(N, 'u', () => random(N));
    return { unique, duplicate };
  } finally {
    for (const schema of [`${run}_inbox`, `${run}_ledger`])
      await sql`drop schema if exists ${sql.id(schema)} cascade`.execute(kysely);
    await observer.end();
    await inbox.close();
    await pool.end();
  }
}

/** Runs one configuration in a child process, from `script`: this one, or another commit's build of it. */
function child(config: string, script: string): Promise<Measured> {
  return new Promise((resolve, reject) => {
    const proc = fork(script, [], { env: { ...process.env, WIRE_COST_CONFIG: config } });
    proc.on('message', (m) => resolve(m as Measured));
    proc.on('exit', (code) => (code === 0 ? undefined : reject(new Error(`${config} exited ${code}`))));
  });
}

if (process.env.WIRE_COST_CONFIG) {
  process.send?.(await measure(process.env.WIRE_COST_CONFIG));
  process.exit(0);
} else {
  const cells = process.argv.slice(2).map((arg) => {
    const [config = '', script = fileURLToPath(import.meta.url)] = arg.split('@');
    if (!CONFIGS.includes(config)) throw new Error(`unknown configuration ${config}; one of ${CONFIGS}`);
    return { name: arg, config, script, runs: [] as Measured[] };
  });
  if (cells.length === 0) throw new Error(`name configurations: ${CONFIGS.join(', ')}`);
  const loads: string[] = [];
  for (let round = 0; round < ROUNDS; round++)
    for (const cell of cells) {
      loads.push(loadavg()[0]!.toFixed(2));
      cell.runs.push(await child(cell.config, cell.script));
    }
  loads.push(loadavg()[0]!.toFixed(2));
  console.log(
    `CPU per delivery, ms (this process + its PostgreSQL backends), ${N} deliveries, ${CONCURRENCY} at once, ${ROUNDS} alternating runs; 1-minute load ${loads.join(' → ')}`,
  );
  for (const { name, runs } of cells) {
    const list = (w: keyof Measured) => runs.map((r) => r[w].toFixed(3)).join(' ');
    console.log(
      `${name.replace(/@.*/, '@before').padEnd(36)} unique ${list('unique')}   duplicate ${list('duplicate')}`,
    );
  }
}
