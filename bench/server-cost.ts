/**
 * What a delivery costs a contender's server, counted rather than timed: the instructions its
 * main thread executes (callgrind), or with --allocations the bytes it allocates (V8's
 * sampling heap profiler). Neither depends on what else the machine is doing; throughput and
 * CPU time on this 2-core machine vary up to 2× from one minute to the next for the same code
 * (BENCHMARKS.md), more than the differences they are asked to show.
 *
 *   npx tsx bench/server-cost.ts                       bare, handmade, inbox; unique
 *   npx tsx bench/server-cost.ts --contenders bare,inbox --workload ordered --requests 800
 *   npx tsx bench/server-cost.ts --contenders inbox --keep    then callgrind_annotate a dump
 *   npx tsx bench/server-cost.ts --allocations         bytes per delivery, and where
 *
 * Each contender's server (bench/server.ts, compiled as bench/run.ts runs it) starts under
 * `valgrind --tool=callgrind`, about 50 times slower than it runs alone (with --allocations,
 * plain Node). It is warmed up, its tables analysed, warmed up again, and then its counters
 * are zeroed and dumped around the measured deliveries (the `zero` and `dump` messages; the
 * heap profiler's start and stop). Instructions are the main thread's, not PostgreSQL's,
 * which bench/postgres-cost.ts counts (INSTRUCTIONS=...). An instruction is not a nanosecond:
 * compare contenders with each other, in one run.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newestDumpInstructions } from './callgrind.js';
import { dropEverything } from './cleanup.js';
import { CONTENDERS, type ContenderConfig } from './contenders.js';
import { forkServer, type Server } from './server-process.js';
import { type BenchDelivery, toRequest, WORKLOADS } from './workloads.js';

const require = createRequire(import.meta.url);
const autocannon = require('autocannon');

function fail(message: string): never {
  console.error(`server-cost: ${message}`);
  process.exit(2);
}
const args = process.argv.slice(2);
const FLAGS = ['--contenders', '--workload', '--warmup', '--requests', '--connections'];
const SWITCHES = ['--keep', '--allocations'];
for (let i = 0; i < args.length; i++) {
  if (SWITCHES.includes(args[i])) continue;
  if (!FLAGS.includes(args[i]))
    fail(`unknown argument ${args[i]}; one of ${[...FLAGS, ...SWITCHES].join(', ')}`);
  if (args[i + 1] === undefined || args[i + 1].startsWith('--')) fail(`${args[i]} takes a value`);
  i++;
}
const value = (name: string): string | undefined => {
  const at = args.indexOf(`--${name}`);
  return at === -1 ? undefined : args[at + 1];
};
const count = (name: string, fallback: number): number => {
  const n = Number(value(name) ?? fallback);
  if (!Number.isInteger(n) || n < 1) fail(`--${name} takes a whole number >= 1, not ${value(name)}`);
  return n;
};
const contenders = (value('contenders') ?? 'bare,handmade,inbox').split(',');
for (const c of contenders)
  if (!CONTENDERS[c]) fail(`unknown contender ${c}; one of ${Object.keys(CONTENDERS)}`);
const workload = WORKLOADS[value('workload') ?? 'unique'] ?? fail(`unknown workload ${value('workload')}`);
const warmup = count('warmup', 1000);
const requests = count('requests', 600);
const connections = count('connections', 4);
// --keep: leave each server's callgrind dumps for callgrind_annotate (where the count goes).
const keep = args.includes('--keep');
const allocations = args.includes('--allocations');
if (keep && allocations)
  fail('--keep keeps callgrind dumps, and --allocations runs no callgrind: use one of them');
try {
  if (!allocations) execFileSync('valgrind', ['--version'], { stdio: 'ignore' });
} catch {
  fail('valgrind is not installed (Debian: apt-get install valgrind)');
}

function load(
  port: number,
  next: () => BenchDelivery,
  amount: number,
): Promise<{ non2xx: number; errors: number }> {
  return new Promise((resolve, reject) =>
    autocannon(
      {
        url: `http://127.0.0.1:${port}`,
        connections,
        amount,
        timeout: 120,
        requests: [{ setupRequest: () => toRequest(next()) }],
      },
      (err: Error | null, r: any) =>
        err ? reject(err) : resolve({ non2xx: r.non2xx, errors: r.errors + r.timeouts }),
    ),
  );
}

/** The server, under callgrind (with --allocations, plain Node). */
function start(contender: string, out: string): Promise<Server> {
  const config: ContenderConfig = { contender, postgresUrl, redisUrl, schemaBase, poolSize: 10 };
  if (allocations) return forkServer(config, {});
  // fork() runs `execPath ...execArgv module args`: valgrind, then node, keeping the IPC channel.
  return forkServer(config, {
    execPath: 'valgrind',
    execArgv: [
      '-q',
      '--tool=callgrind',
      `--callgrind-out-file=${out}/cg.%p`,
      '--zero-before=uv_os_getpriority',
      '--dump-before=uv_loadavg',
      '--separate-threads=yes',
      process.execPath,
      // With --keep: V8 writes /tmp/perf-<pid>.map, which names the compiled JavaScript that
      // callgrind can only give addresses for.
      ...(keep ? ['--perf-basic-prof', '--no-logfile-per-isolate', `--logfile=${out}/v8.log`] : []),
    ],
  });
}

const postgresUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const schemaBase = `bench_cost_${process.pid}`;
const rows: Array<{ contender: string; perDelivery: number; non2xx: number; broken: string }> = [];
try {
  for (const contender of contenders) {
    const out = mkdtempSync(join(tmpdir(), 'wi-instructions-'));
    const server = await start(contender, out);
    try {
      const tag = `i${Date.now().toString(36)}`;
      await load(server.port, workload.next(`${tag}w`), warmup);
      // The events a replay repeats, under the measured stream's prefix (as bench/run.ts seeds them).
      const seed = workload.seed?.(`${tag}m`);
      if (seed) await load(server.port, seed.next, seed.count);
      await server.call('analyze');
      // The second warm-up and the measurement are one stream: an ordered workload's measured
      // deliveries advance keys the warm-up made, as most of a bench cell's do; a replay's
      // repeat the seeded events.
      const next = workload.next(`${tag}m`);
      await load(server.port, next, warmup);
      await server.call(allocations ? 'allocations-start' : 'zero');
      const measured = await load(server.port, next, requests);
      const allocated = await server.call(allocations ? 'allocations-stop' : 'dump');
      const stats = await server.call('stats', { prefix: `${tag}m` });
      // Reported, not fatal: `naive` is in the bench to show that it does this.
      const broken = stats.doubleApplied || stats.outOfOrder;
      rows.push({
        contender,
        broken: broken ? `${stats.doubleApplied} applied twice, ${stats.outOfOrder} out of order` : '',
        // The main thread (the dump is written by the thread that called `loadavg`): the event
        // loop's instructions, the JavaScript and the collector's work there. V8's background
        // threads (the optimising compiler, the collector's helpers) are not in it: after a long
        // enough warm-up they have little left to do.
        perDelivery:
          (allocations ? allocated.total : newestDumpInstructions(out, server.child.pid!, '01')) / requests,
        non2xx: measured.non2xx + measured.errors,
      });
      if (allocations) {
        console.log(
          `${contender}: where its ${(allocated.total / requests / 1000).toFixed(1)} kB per delivery are allocated`,
        );
        for (const [where, bytes] of allocated.top as Array<[string, number]>)
          console.log(`  ${(bytes / requests).toFixed(0).padStart(7)} B  ${where}`);
      } else
        console.error(
          `${contender}: ${(rows.at(-1)!.perDelivery / 1000).toFixed(0)}k instructions per delivery`,
        );
    } finally {
      // callgrind writes its last dump as the process exits: remove the directory after.
      const { child } = server;
      const gone = child.exitCode !== null || child.signalCode !== null;
      const exited = gone ? undefined : new Promise((resolve) => child.once('exit', resolve));
      await server.call('close').catch(() => {});
      await exited;
      if (keep) console.error(`${contender}: callgrind dumps kept in ${out}`);
      else rmSync(out, { recursive: true, force: true });
    }
  }
} finally {
  // Every contender's schemas (and the ledger's), as bench/run.ts drops its own.
  await dropEverything(postgresUrl, redisUrl, schemaBase);
}
const base = rows.find((r) => r.contender === 'bare') ?? rows[0];
console.log(
  allocations
    ? `Bytes allocated per delivery, thousands (V8's sampling heap profiler, every 512 B, freed objects included; workload ${workload.name}; ${requests} measured after ${warmup} + ${warmup} warm-up, ${connections} connections)`
    : `Instructions per delivery on the server's main thread, thousands (callgrind; workload ${workload.name}; ${requests} measured after ${warmup} + ${warmup} warm-up, ${connections} connections)`,
);
for (const r of rows)
  console.log(
    `${r.contender.padEnd(22)} ${(r.perDelivery / 1000).toFixed(allocations ? 1 : 0).padStart(7)}k  ${(r.perDelivery / base.perDelivery).toFixed(2)}× ${base.contender}${r.non2xx ? `  (${r.non2xx} not 2xx)` : ''}${r.broken ? `  (${r.broken})` : ''}`,
  );
