/**
 * `npm run bench`: the contenders side by side, under the same load, in the same run.
 *
 *   npm run bench                         the default cells (DEFAULT in workloads.ts): every goal's
 *                                         ratio, 1 run of 4 s per cell after 1 s of warm-up, ≤ 5 minutes
 *   npm run bench -- --full               every cell of MATRIX, 3 runs of 6 s (after 2 s), medians
 *   npm run bench -- --contenders inbox,bare --workloads unique
 *                                         cells of MATRIX (either flag alone: all of the other side)
 *   npm run bench -- --cpu-prof           also write a CPU profile of every server (bench/results/profiles)
 *   npm run bench -- --rate 300           offer 300 req/s instead of saturating (CPU per request compares work)
 *   npm run bench -- --long 200000        RSS growth of the inbox over that many unique deliveries
 *   npm run bench -- --instances 2 --contenders inbox --workloads unique
 *                                         N app instances (servers) per cell against one PostgreSQL,
 *                                         the load spread over them; written to
 *                                         bench/results/instances-N.json (BENCHMARKS.md untouched)
 *   --runs, --duration and --warmup override the defaults of either set.
 *
 * Ratios within one run are the figure: two cells measured a minute apart on the same machine
 * share its weather, whatever else runs on it, and on two cores a run of cells back to back
 * keeps the load high by itself. So each cell records the 1-minute load average at both ends and
 * the report prints it, but no cell waits for the load to fall and none is left out for it.
 *
 * The load (autocannon, in this process) and each contender's server (a child process) are
 * pinned to different cores with taskset when there are two or more. PostgreSQL and Redis are
 * the ones on loopback (DATABASE_URL, REDIS_URL); everything the bench creates lives in schemas
 * and Redis keys named `bench_<random>` and is dropped at the end.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { dropEverything } from './cleanup.js';
import { CONTENDERS, type ContenderConfig, type Stats } from './contenders.js';
import { postgresCpuMs, postgresCpuMsSince, processCpuMs } from './process-cpu.js';
import { type Cell, type Goal, report, writeLongGoal } from './report.js';
import { forkServer, type Server } from './server-process.js';
import { type BenchDelivery, DEFAULT, MATRIX, toRequest, WORKLOADS } from './workloads.js';

const require = createRequire(import.meta.url);
const autocannon = require('autocannon');
const here = dirname(fileURLToPath(import.meta.url));

// ---- flags -----------------------------------------------------------------------------------
const argv = process.argv.slice(2);
function flag(name: string): boolean {
  return argv.includes(`--${name}`);
}
function value(name: string): string | undefined {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
}
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
// Several instances per cell: the load round-robin over their ports, their CPU summed. Not
// pinned then: on two cores, N servers pinned to one would measure that core, not the instances.
const instances = count('instances', 1) as number;
// Each instance's JIT warms on its share of the warm-up: N instances get N times the default
// (two instances after one second measured 948 req/s at 1,299 µs of Node CPU each, after three
// seconds 1,579 at 663, as one instance's 634).
const warmup = count('warmup', (full ? 2 : 1) * instances, 0) as number;
const connections = count('connections', 50) as number;
const poolSize = count('pool', 10) as number;
const cpuProf = flag('cpu-prof');
// A fixed offered rate (req/s, all connections together) instead of as fast as the server goes:
// CPU per request at a rate every contender sustains compares their work, not their batching.
const rate = count('rate', undefined);
const long = count('long', undefined, 10);
const pin = !flag('no-pin') && instances === 1;
const postgresUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const selectedContenders = value('contenders')?.split(',');
// Named cells are taken from the full grid: naming a contender outside DEFAULT measures it.
const grid = full || value('workloads') || selectedContenders ? MATRIX : DEFAULT;
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

// ---- pinning ---------------------------------------------------------------------------------
const cores = cpus().length;
let canPin = false;
if (pin && cores >= 2) {
  try {
    execFileSync('taskset', ['-acp', '1', String(process.pid)], { stdio: 'ignore' });
    canPin = true;
  } catch {
    canPin = false;
  }
}

// ---- a contender's server ------------------------------------------------------------------

async function startServer(contender: string, schemaBase: string, profileName?: string): Promise<Server> {
  const config: ContenderConfig = { contender, postgresUrl, redisUrl, schemaBase, poolSize };
  const execArgv = ['--expose-gc'];
  if (profileName) {
    // One directory per server: V8 may write a profile per thread, so the files keep their
    // default names; profile-summary.ts reads the busiest.
    const dir = join(here, 'results', 'profiles', profileName);
    mkdirSync(dir, { recursive: true });
    execArgv.push('--cpu-prof', `--cpu-prof-dir=${dir}`);
  }
  return forkServer(config, { execArgv }, (child) => {
    if (canPin) execFileSync('taskset', ['-acp', '0', String(child.pid)], { stdio: 'ignore' });
  });
}

async function stopServer(server: Server): Promise<void> {
  const exited = new Promise<void>((resolve) => server.child.once('exit', () => resolve()));
  await server.call('close').catch(() => {});
  await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
  if (server.child.exitCode === null) server.child.kill('SIGKILL');
}

// ---- load ------------------------------------------------------------------------------------
interface Load {
  rps: number;
  p50: number;
  p99: number;
  total: number;
  non2xx: number;
  errors: number;
}

function load(
  port: number | number[],
  next: () => BenchDelivery,
  limit: { seconds?: number; amount?: number },
): Promise<Load> {
  return new Promise((resolve, reject) => {
    autocannon(
      {
        // Several ports: autocannon opens its connections over them in turn.
        url: Array.isArray(port) ? port.map((p) => `http://127.0.0.1:${p}`) : `http://127.0.0.1:${port}`,
        // autocannon refuses an amount smaller than its connections (a short --long step).
        connections: Math.min(connections, limit.amount ?? connections),
        ...(rate ? { overallRate: rate } : {}),
        ...(limit.amount ? { amount: limit.amount } : { duration: limit.seconds }),
        requests: [{ setupRequest: () => toRequest(next()) }],
      },
      (err: Error | null, r: any) => {
        if (err) return reject(err);
        resolve({
          rps: r.requests.total / r.duration,
          p50: r.latency.p50,
          p99: r.latency.p99,
          total: r.requests.total,
          non2xx: r.non2xx,
          errors: r.errors + r.timeouts,
        });
      },
    );
  });
}

// ---- the database between cells ----------------------------------------------------------------
// Both run on one connection of the cell's own (`measure`), opened before its warm-up and closed
// with its server; idle while the cell is measured.

/**
 * A CHECKPOINT before each cell's warm-up, so that every cell is measured in the same place of
 * PostgreSQL's checkpoint cycle. After a checkpoint starts, the first change of each page writes
 * the whole page into the WAL; timed checkpoints (`checkpoint_timeout`, 5 minutes by default)
 * start wherever the clock puts them, so without this the cell measured just after one paid for
 * those full pages and its neighbours did not: in one full run, `inbox`'s cell of the first run
 * began (by the run's average cell length) within seconds of a timed checkpoint's start, and
 * `pg µs/req` of `inbox` went from 370-420 in narrow runs to 430-500 there. Now the warm-up pays
 * the first change of the pages the cell touches, and, one checkpoint every cell (well under 5
 * minutes), no timed one starts during a measurement. Needs a superuser or, from PostgreSQL 15, the role `pg_checkpoint`; without
 * either it is said once and the bench goes on.
 */
let checkpointRefused = false;
async function checkpoint(client: pg.Client): Promise<void> {
  if (checkpointRefused) return;
  try {
    await client.query('checkpoint');
  } catch (err) {
    checkpointRefused = true;
    console.log(
      `bench: CHECKPOINT refused (${(err as Error).message}); cells are measured wherever timed checkpoints fall`,
    );
  }
}

/**
 * Leaves the tables as autovacuum would between cells. The contenders' tables live through the
 * whole run, so autovacuum wakes for one cell's rows during a later cell, and `pg µs/req` counts
 * every PostgreSQL process: a cell measured then paid for another's vacuum, in its CPU and in its
 * throughput. So this waits (up to a minute) until no autovacuum worker runs; what a cell's own
 * writes make autovacuum do while it is measured stays in it, as it would in production. On a
 * server with autovacuum off (a CI machine's configuration, say) it stands in for it: VACUUM
 * (ANALYZE) of every table of this run's schemas. Without that, a table updated at every event
 * (an ordered key's row) only grows dead versions from cell to cell; on such a machine ordered
 * fell from 0.84× unordered in the first run to 0.62× in the next, likely for that reason.
 * Returns how long it took, in ms.
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

// ---- one measurement -------------------------------------------------------------------------
async function measure(
  run: number,
  workload: string,
  contender: string,
  schemaBase: string,
  tag: string,
): Promise<Cell> {
  const w = WORKLOADS[workload];
  const loadBefore = loadavg()[0];
  // One after the other: the first creates the tables (migrations, the ledger) the others find.
  const servers: Server[] = [];
  const admin = new pg.Client({ connectionString: postgresUrl });
  try {
    for (let i = 0; i < instances; i++)
      servers.push(
        await startServer(
          contender,
          schemaBase,
          cpuProf ? `${contender}-${workload}-r${run}${instances > 1 ? `-i${i}` : ''}` : undefined,
        ),
      );
    const [server] = servers;
    const ports = servers.map((s) => s.port);
    const serversCpuMs = () => servers.reduce((sum, s) => sum + processCpuMs(s.child.pid!), 0);
    await admin.connect();
    await checkpoint(admin);
    if (warmup > 0) await load(ports, w.next(`${tag}w`), { seconds: warmup });
    await server.call('analyze');
    const settledMs = await settleVacuum(admin, schemaBase);
    if (settledMs > 1000)
      console.log(
        `bench: ${(settledMs / 1000).toFixed(1)} s waiting for autovacuum, or vacuuming where it is off`,
      );
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
    return {
      run,
      workload,
      contender,
      ...l,
      cpuUs,
      pgUs,
      ...stats,
      drainMs: stats.drainMs,
      loadBefore,
      loadAfter,
    };
  } finally {
    await admin.end().catch(() => {});
    await Promise.all(servers.map(stopServer));
  }
}

// ---- long mode: RSS growth -----------------------------------------------------------------
// One inbox server takes `total` unique deliveries at full speed, its RSS read after a warm-up
// and at ten steps. The 1-minute load is recorded beside the figure (at the start, at each step,
// at the end) and never paused for: what a delivery leaves behind in memory grows with the
// deliveries, not with whatever else the machine is doing meanwhile.
async function longMode(total: number, schemaBase: string) {
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
    const before = await server.call<number>('rss');
    const samples: Array<{ deliveries: number; rssMb: number; load: number }> = [];
    const step = Math.ceil(total / 10);
    let sent = 0;
    while (sent < total) {
      await deliver(step);
      sent += step;
      const rss = await server.call<number>('rss');
      const loadNow = loadavg()[0];
      samples.push({ deliveries: sent, rssMb: rss / 2 ** 20, load: loadNow });
      console.log(
        `long: ${sent} deliveries, rss ${(rss / 2 ** 20).toFixed(1)} MB, load ${loadNow.toFixed(2)}, ${Math.round((Date.now() - started) / 1000)} s`,
      );
    }
    const after = await server.call<number>('rss');
    const growthMb = (after - before) / 2 ** 20;
    const result = {
      deliveries: total,
      failed,
      rssBeforeMb: before / 2 ** 20,
      rssAfterMb: after / 2 ** 20,
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
    // Its row in BENCHMARKS.md's goal table; the last run's cells stay as they were.
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
    // A run of several instances per cell is a figure of its own, beside the usual run's.
    writeMarkdown: !flag('no-markdown') && value('instances') === undefined,
    instances,
    resultsFile: value('instances') === undefined ? 'latest.json' : `instances-${instances}.json`,
    loadAtStart,
    loadAtEnd: loadavg()[0],
  });
}

const loadAtStart = loadavg()[0];

// ---- main ------------------------------------------------------------------------------------
const schemaBase = `bench_${randomBytes(3).toString('hex')}`;
try {
  if (long !== undefined) {
    await longMode(long, schemaBase);
  } else {
    const plan: Array<[string, string]> = [];
    for (const w of selectedWorkloads) {
      for (const c of grid[w]) {
        if (!CONTENDERS[c]) continue; // not built yet (it lands with its feature)
        if (selectedContenders && !selectedContenders.includes(c)) continue;
        plan.push([w, c]);
      }
    }
    console.log(
      `bench: ${plan.length} cells × ${runs} run(s), ${duration} s each (+${warmup} s warm-up), ${connections} connections, pool ${poolSize}` +
        `${instances > 1 ? `, ${instances} instances per cell` : ''}; ` +
        `${canPin ? 'server on core 0, load on core 1' : 'not pinned'}; schema ${schemaBase}`,
    );
    const cells: Cell[] = [];
    // Runs outermost, contenders innermost: every ratio compares cells measured minutes apart
    // at most, in the same run, on the same noisy shared machine.
    for (let run = 1; run <= runs; run++) {
      for (const [w, c] of plan) {
        const tag = `${schemaBase}r${run}${w}${c.replace(/[^a-z]/g, '')}`;
        const cell = await measure(run, w, c, schemaBase, tag);
        cells.push(cell);
        console.log(
          `run ${run} ${w.padEnd(8)} ${c.padEnd(20)} ${Math.round(cell.rps).toString().padStart(6)} req/s  p50 ${cell.p50} ms  p99 ${cell.p99} ms  ` +
            `cpu ${Math.round(cell.cpuUs)} µs/req  pg ${Math.round(cell.pgUs)} µs/req ` +
            // What one PostgreSQL core would carry at this cost, were nothing else limiting.
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
    await dropEverything(postgresUrl, redisUrl, schemaBase).catch((err) =>
      console.error('bench: cleanup failed', err),
    );
}
