/**
 * `npm run bench`: the contenders side by side, under the same load, in the same run.
 *
 *   npm run bench                         the default cells (DEFAULT in workloads.ts), 1 run of 4 s
 *   npm run bench -- --full               every cell of MATRIX, 3 runs of 6 s, medians
 *   npm run bench -- --contenders inbox,bare --workloads unique      cells of MATRIX
 *   npm run bench -- --long 200000        RSS growth of the inbox over that many deliveries
 *   npm run bench -- --instances 2 ...    N servers per cell, the load spread over them
 *   npm run bench -- --citus              the inbox on DATABASE_URL, and on the Citus cluster's
 *                                         databases (CITUS_URLS) with one worker and two
 *                                         (bench/results/citus.json; BENCHMARKS.md untouched)
 *                                         (bench/results/instances-N.json; BENCHMARKS.md untouched)
 *   --runs, --duration and --warmup override the defaults of either set.
 *
 * Ratios are taken within one run; each cell's 1-minute load is recorded, never waited for. The
 * load (autocannon, in this process) and each server (a child process) are pinned to different
 * cores. What it creates on PostgreSQL and Redis is named `bench_<random>`, dropped at the end.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { dropEverything } from './cleanup.js';
import { CITUS_URLS, CONTENDERS, type ContenderConfig, type Stats } from './contenders.js';
import { postgresCpuMs, postgresCpuMsSince, processCpuMs } from './process-cpu.js';
import { type Cell, type Goal, type Load, report, writeLongGoal } from './report.js';
import { forkServer, type Server } from './server-process.js';
import { type BenchDelivery, CITUS, DEFAULT, MATRIX, toRequest, WORKLOADS } from './workloads.js';

const require = createRequire(import.meta.url);
const autocannon = require('autocannon');
const here = dirname(fileURLToPath(import.meta.url));

const argv = process.argv.slice(2);
const flag = (name: string) => argv.includes(`--${name}`);
const value = (name: string) => (flag(name) ? argv[argv.indexOf(`--${name}`) + 1] : undefined);
/** A flag's whole number, at least `min`; anything else stops the bench with the flag's name. */
function count(name: string, fallback: number | undefined, min = 1): number | undefined {
  const raw = value(name);
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) fail(`--${name} takes a whole number >= ${min}, not ${raw}`);
  return n;
}
const full = flag('full');
const runs = count('runs', full ? 3 : 1) as number;
const duration = count('duration', full ? 6 : 4) as number;
// Several instances per cell share the load and are not pinned (on two cores, N servers on one
// would measure that core); each JIT warms on its share, so N get N times the warm-up.
const instances = count('instances', 1) as number;
const warmup = count('warmup', (full ? 2 : 1) * instances, 0) as number;
const connections = count('connections', 50) as number;
const poolSize = count('pool', 10) as number;
const long = count('long', undefined, 10);
const pin = !flag('no-pin') && instances === 1;
const postgresUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const selectedContenders = value('contenders')?.split(',');
// Named cells are taken from the full grid: naming a contender outside DEFAULT measures it.
const citus = flag('citus');
const grid = citus ? CITUS : full || value('workloads') || selectedContenders ? MATRIX : DEFAULT;
const selectedWorkloads = (value('workloads') ?? Object.keys(grid).join(',')).split(',');
for (const w of selectedWorkloads)
  if (!WORKLOADS[w]) fail(`unknown workload ${w}; one of ${Object.keys(WORKLOADS)}`);
for (const c of selectedContenders ?? [])
  if (!CONTENDERS[c]) fail(`unknown contender ${c}; one of ${Object.keys(CONTENDERS)}`);

function fail(message: string): never {
  console.error(`bench: ${message}`);
  process.exit(2);
}

const started = Date.now();

/** Pins a process to one core; false where taskset is missing or refused. */
function pinTo(core: number, pid: number): boolean {
  try {
    execFileSync('taskset', ['-acp', String(core), String(pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
const canPin = pin && cpus().length >= 2 && pinTo(1, process.pid);

function startServer(contender: string, schemaBase: string): Promise<Server> {
  const config: ContenderConfig = { contender, postgresUrl, redisUrl, schemaBase, poolSize };
  return forkServer(config, (child) => canPin && pinTo(0, child.pid!));
}

async function stopServer(server: Server): Promise<void> {
  const exited = new Promise<void>((resolve) => server.child.once('exit', () => resolve()));
  await server.call('close').catch(() => {});
  await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
  if (server.child.exitCode === null) server.child.kill('SIGKILL');
}

async function load(
  port: number | number[],
  next: () => BenchDelivery,
  limit: { seconds?: number; amount?: number },
): Promise<Load> {
  const r = await autocannon({
    // Several ports: autocannon opens its connections over them in turn; it refuses an amount
    // smaller than its connections (a short --long step).
    url: Array.isArray(port) ? port.map((p) => `http://127.0.0.1:${p}`) : `http://127.0.0.1:${port}`,
    connections: Math.min(connections, limit.amount ?? connections),
    ...(limit.amount ? { amount: limit.amount } : { duration: limit.seconds }),
    requests: [{ setupRequest: () => toRequest(next()) }],
  });
  const { total } = r.requests;
  return {
    rps: total / r.duration,
    p50: r.latency.p50,
    p99: r.latency.p99,
    total,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
  };
}

/**
 * A CHECKPOINT before each cell's warm-up, so that the warm-up pays for the full pages it writes
 * into the WAL and no timed checkpoint falls in a measurement. Refused, it is said once.
 */
let checkpointRefused = false;
async function checkpoint(client: pg.Client): Promise<void> {
  if (checkpointRefused) return;
  try {
    await client.query('checkpoint');
  } catch (err) {
    checkpointRefused = true;
    const why = (err as Error).message;
    console.log(`bench: CHECKPOINT refused (${why}); cells are measured wherever timed checkpoints fall`);
  }
}

/**
 * Waits (up to a minute, returns how long, ms) until no autovacuum worker runs, so that no cell
 * pays for another's vacuum; where autovacuum is off, VACUUM (ANALYZE) stands in for it.
 */
async function settleVacuum(client: pg.Client, schemaBase: string): Promise<number> {
  const started = Date.now();
  const { rows: setting } = await client.query<{ autovacuum: string }>('show autovacuum');
  if (setting[0]?.autovacuum === 'off') {
    const { rows } = await client.query<{ name: string }>(
      `select format('%I.%I', schemaname, tablename) as name from pg_tables where starts_with(schemaname, $1)`,
      [schemaBase],
    );
    for (const { name } of rows) await client.query(`vacuum (analyze) ${name}`);
    return Date.now() - started;
  }
  while (Date.now() - started < 60_000) {
    const { rows } = await client.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity where backend_type = 'autovacuum worker'`,
    );
    if (rows[0].n === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return Date.now() - started;
}

async function measure(run: number, workload: string, contender: string): Promise<Cell> {
  const w = WORKLOADS[workload];
  const tag = `${schemaBase}r${run}${workload}${contender.replace(/[^a-z]/g, '')}`;
  const loadBefore = loadavg()[0];
  // One after the other: the first creates the tables (migrations, the ledger) the others find.
  const servers: Server[] = [];
  const admin = new pg.Client({ connectionString: postgresUrl });
  try {
    for (let i = 0; i < instances; i++) servers.push(await startServer(contender, schemaBase));
    const [server] = servers;
    const ports = servers.map((s) => s.port);
    const serversCpuMs = () => servers.reduce((sum, s) => sum + processCpuMs(s.child.pid!), 0);
    await admin.connect();
    await checkpoint(admin);
    if (warmup > 0) await load(ports, w.next(`${tag}w`), { seconds: warmup });
    await server.call('analyze');
    const settledMs = await settleVacuum(admin, schemaBase);
    const settledS = (settledMs / 1000).toFixed(1);
    if (settledMs > 1000)
      console.log(`bench: ${settledS} s waiting for autovacuum, or vacuuming where it is off`);
    const prefix = `${tag}m`;
    if (w.seed) {
      const seed = w.seed(prefix);
      await load(ports, seed.next, { amount: seed.count });
    }
    const cpuBefore = serversCpuMs();
    const pgBefore = postgresCpuMs();
    const l = await load(ports, w.next(prefix), { seconds: duration });
    const cpuUs = ((serversCpuMs() - cpuBefore) * 1000) / Math.max(1, l.total);
    const pgUs = (postgresCpuMsSince(pgBefore) * 1000) / Math.max(1, l.total);
    // Each instance's own work is finished (its `idle`) before the ledger, which they share, is read.
    let stats = await server.call<Stats>('stats', { prefix });
    for (const other of servers.slice(1)) stats = await other.call<Stats>('stats', { prefix });
    const loadAfter = loadavg()[0];
    return { run, workload, contender, ...l, cpuUs, pgUs, ...stats, loadBefore, loadAfter };
  } finally {
    await admin.end().catch(() => {});
    await Promise.all(servers.map(stopServer));
  }
}

// `--long`: one inbox server takes `total` unique deliveries at full speed, its RSS read after a
// warm-up and at ten steps, the load recorded beside it.
async function longMode(total: number) {
  const loadBefore = loadavg()[0];
  const server = await startServer('inbox', schemaBase);
  const started = Date.now();
  let failed = 0;
  const gen = WORKLOADS.unique.next(`${schemaBase}L`);
  const deliver = async (amount: number) => {
    const l = await load(server.port, gen, { amount });
    failed += l.non2xx + l.errors;
  };
  try {
    await deliver(Math.ceil(Math.min(20_000, total / 10)));
    const mb = (bytes: number) => bytes / 2 ** 20;
    const before = await server.call<number>('rss');
    const samples: Array<{ deliveries: number; rssMb: number; load: number }> = [];
    const step = Math.ceil(total / 10);
    let sent = 0;
    while (sent < total) {
      await deliver(step);
      sent += step;
      const rss = await server.call<number>('rss');
      const loadNow = loadavg()[0];
      samples.push({ deliveries: sent, rssMb: mb(rss), load: loadNow });
      const seconds = Math.round((Date.now() - started) / 1000);
      console.log(
        `long: ${sent} deliveries, rss ${mb(rss).toFixed(1)} MB, load ${loadNow.toFixed(2)}, ${seconds} s`,
      );
    }
    const after = await server.call<number>('rss');
    const growthMb = mb(after - before);
    const result = {
      deliveries: total,
      failed,
      rssBeforeMb: mb(before),
      rssAfterMb: mb(after),
      growthMb,
      perMillionMb: (growthMb * 1_000_000) / total,
      extrapolated: total < 1_000_000,
      samples,
      seconds: Math.round((Date.now() - started) / 1000),
      at: new Date().toISOString(),
      loadAtStart: loadBefore,
      loadAtEnd: loadavg()[0],
    };
    writeFileSync(join(here, 'results', 'long.json'), `${JSON.stringify(result, null, 2)}\n`);
    console.log(JSON.stringify(result, null, 2));
    const g = writeLongGoal();
    console.log(`${g.goal}: ${g.measured}`);
  } finally {
    await stopServer(server);
  }
}

function write(cells: Cell[], runsDone: number): Goal[] {
  const command = `npm run bench${argv.length ? ` -- ${argv.join(' ')}` : ''}`;
  return report(cells, {
    command,
    runs: runsDone,
    duration,
    warmup,
    connections,
    poolSize,
    pinned: canPin,
    postgresUrl,
    elapsedS: Math.round((Date.now() - started) / 1000),
    writeMarkdown: !flag('no-markdown') && value('instances') === undefined && !citus,
    instances,
    resultsFile: citus
      ? 'citus.json'
      : value('instances') === undefined
        ? 'latest.json'
        : `instances-${instances}.json`,
    loadAtStart,
    loadAtEnd: loadavg()[0],
  });
}

const loadAtStart = loadavg()[0];

const schemaBase = `bench_${randomBytes(3).toString('hex')}`;
try {
  if (long !== undefined) {
    await longMode(long);
  } else {
    const plan = selectedWorkloads.flatMap((w) =>
      grid[w].filter((c) => !selectedContenders || selectedContenders.includes(c)).map((c) => [w, c]),
    );
    console.log(
      `bench: ${plan.length} cells × ${runs} run(s), ${duration} s each (+${warmup} s warm-up), ${connections} connections, pool ${poolSize}` +
        `${instances > 1 ? `, ${instances} instances per cell` : ''}; ` +
        `${canPin ? 'server on core 0, load on core 1' : 'not pinned'}; schema ${schemaBase}`,
    );
    const cells: Cell[] = [];
    // Runs outermost, contenders innermost: every ratio compares cells of the same run.
    for (let run = 1; run <= runs; run++) {
      for (const [w, c] of plan) {
        const cell = await measure(run, w, c);
        cells.push(cell);
        console.log(
          `run ${run} ${w.padEnd(8)} ${c.padEnd(20)} ${Math.round(cell.rps).toString().padStart(6)} req/s  p50 ${cell.p50} ms  p99 ${cell.p99} ms  ` +
            `cpu ${Math.round(cell.cpuUs)} µs/req  pg ${Math.round(cell.pgUs)} µs/req ` +
            `(${Math.round(1e6 / Math.max(1, cell.pgUs))} req/s per pg core)  ` +
            `non-2xx ${cell.non2xx}  double-applied ${cell.doubleApplied}  out-of-order ${cell.outOfOrder}  ` +
            `load ${cell.loadBefore.toFixed(2)} → ${cell.loadAfter.toFixed(2)}`,
        );
      }
      // The report so far, after every run: a long full run stopped early still leaves one.
      if (run < runs) write(cells, run);
    }
    const goals = write(cells, runs);
    if (goals.some((g) => g.correctnessViolation)) process.exitCode = 1;
  }
} finally {
  if (!flag('keep'))
    for (const url of [postgresUrl, ...(citus ? Object.values(CITUS_URLS) : [])])
      await dropEverything(url, redisUrl, schemaBase).catch((err) =>
        console.error('bench: cleanup failed', err),
      );
}
