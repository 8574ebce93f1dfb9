/**
 * `npm run chaos`: nothing lost, applied twice or out of order while instances die, connections
 * are cut, the database and Redis restart, and the network misbehaves.
 *
 *   npm run chaos -- --ci                      a few thousand deliveries, under 3 minutes (.ci/run)
 *   npm run chaos                              full: ≥ 100,000 deliveries
 *   npm run chaos -- --deliveries 100000       about that many events (sized plan and deadline)
 *   npm run chaos -- --shared-postgres         on DATABASE_URL (never restarted), not a cluster of its own
 *   npm run chaos -- --citus [--ci]            on the Citus cluster of shared/citus/cluster.sh (its
 *                                              coordinator, CITUS_URL, is never restarted; a worker is)
 *   npm run chaos -- --deliveries 1000000 --retention-s 300
 *                                              the soak, retention pruning during the run
 *
 * Three instances of the ledger app (child processes) on a throwaway PostgreSQL and Redis of
 * its own, behind a balancer and the fault proxy (src/testing), take ordered and unordered
 * events from a retrying sender while instances are SIGKILLed mid-handler or mid-drain, their
 * connections terminated, PostgreSQL and Redis restarted. Then every guarantee is checked
 * against the ledger and the inbox; any violation exits non-zero.
 */
import { type ChildProcess, execFile, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Ledger } from '../examples/ledger/ledger.js';
import { FRAMEWORKS, type Framework } from '../examples/ledger/start.js';
import { createInbox } from '../src/index.js';
import { checkInvariants, createFaultProxy, type FaultProxy } from '../src/testing/index.js';
import {
  type PrivateRedis,
  postgresBinariesAvailable,
  redisServerAvailable,
  startPrivatePostgres,
  startPrivateRedis,
} from '../test/support/private-servers.js';
import { type Balancer, startBalancer } from './balancer.js';
import { type ChaosEvent, send } from './chaos-sender.js';

const here = dirname(fileURLToPath(import.meta.url));
const argv = process.argv.slice(2);
const ci = argv.includes('--ci');
// On Citus the instances, the ledger's tables and the inbox's are on the cluster, distributed.
const citus = argv.includes('--citus');
const sharedPostgres = citus || argv.includes('--shared-postgres') || !postgresBinariesAvailable();
function value(name: string): number | undefined {
  const i = argv.indexOf(`--${name}`);
  if (i < 0) return undefined;
  const n = Number(argv[i + 1]);
  if (Number.isSafeInteger(n) && n >= 1) return n;
  console.error(`chaos: --${name} must be a positive integer; got ${JSON.stringify(argv[i + 1])}`);
  process.exit(2);
}

const privatePostgres = sharedPostgres ? undefined : await startPrivatePostgres();
const privateRedis = redisServerAvailable() ? await startPrivateRedis() : undefined;
const postgresUrl = citus
  ? (process.env.CITUS_URL ?? 'postgres://postgres@127.0.0.1:5440/inbox')
  : (privatePostgres?.url ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test');
const run = `chaos_${randomBytes(3).toString('hex')}`;
const applicationName = `webhook-inbox-${run}`;
const inboxSchema = `${run}_inbox`;
const ledgerSchema = `${run}_ledger`;
const retentionS = value('retention-s');
// Longer than any retry chain the faults cause: a gap that times out is the inbox giving up on
// an event, and this suite must see none. While a Citus worker starts, each attempt to reach it
// waits up to citus.node_connection_timeout (30 s), several in turn.
const gapTimeoutMs = citus ? 180_000 : 60_000;

const plan = ci
  ? // The sender's deadline is loose, so that a busy CI machine is slow rather than red.
    { keys: 120, seqs: 10, unordered: 900, poison: 8, concurrency: 48, window: 3, minutes: 4 }
  : { keys: 500, seqs: 120, unordered: 30_000, poison: 40, concurrency: 48, window: 4, minutes: 40 };
const targetEvents = value('deliveries');
if (targetEvents !== undefined) {
  // 70 % ordered over `keys` keys, the rest unordered; 40 minutes of deadline per 100,000.
  plan.seqs = Math.max(1, Math.round((targetEvents * 0.7) / plan.keys));
  plan.unordered = Math.max(0, targetEvents - plan.keys * plan.seqs);
  plan.minutes = Math.max(plan.minutes, Math.ceil((targetEvents / 100_000) * 40) + 5);
}
const faultEveryMs = ci
  ? { kill: 4000, terminate: 3000, postgresRestart: 10_000, redisRestart: 6_000, workerRestart: 45_000 }
  : { kill: 6000, terminate: 4000, postgresRestart: 60_000, redisRestart: 20_000, workerRestart: 120_000 };
// A worker's shards are out of reach while it is down, and a crashed worker's in-doubt two-phase
// commits hold their rows until the coordinator's recovery (citus.recover_2pc_interval, 1 min).
if (citus && ci) plan.minutes = 10;
// At the fault proxy, per request.
const rates = { drop: 0.02, dropResponse: 0.03, duplicate: 0.05, delay: 0.1, reorder: 0.05, error: 0.03 };

const faults: Record<string, number> = {};
const crashes: string[] = [];
let stopping = false;
const bump = (kind: string) => {
  faults[kind] = (faults[kind] ?? 0) + 1;
};
const log = (msg: string) => console.log(`chaos ${new Date().toISOString().slice(11, 19)} ${msg}`);

interface Instance {
  name: string;
  framework: Framework;
  /** The last instance runs in deferred mode: its claims go in batches, its workers apply. */
  mode: 'inline' | 'deferred';
  port: number;
  child?: ChildProcess;
  alive: boolean;
  /** Asks the running process (`inflight`); undefined if it does not answer within 500 ms. */
  call?: (cmd: string) => Promise<any>;
}

/** RSS samples (MiB) of one process: the first taken, the last, the most. */
interface Rss {
  first: number;
  last: number;
  most: number;
  samples: number;
}
const rssByProcess = new Map<number, Rss & { instance: string }>();
function sampleRss(instance: Instance): void {
  const pid = instance.child?.pid;
  if (!instance.alive || pid === undefined) return;
  let mib: number;
  try {
    mib = Math.round(Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024);
  } catch {
    return; // killed since the check, or no /proc
  }
  if (!Number.isFinite(mib)) return;
  const seen = rssByProcess.get(pid) ?? {
    instance: instance.name,
    first: mib,
    last: mib,
    most: mib,
    samples: 0,
  };
  seen.last = mib;
  seen.most = Math.max(seen.most, mib);
  seen.samples++;
  rssByProcess.set(pid, seen);
}

/** Each instance's longest-sampled process. */
function rssSummary(): Record<string, string> {
  const longest = new Map<string, Rss>();
  for (const r of rssByProcess.values())
    if ((longest.get(r.instance)?.samples ?? 0) < r.samples) longest.set(r.instance, r);
  const line = (r: Rss) =>
    `${r.first} -> ${r.last} MiB (most ${r.most}) over ${r.samples} samples, 10 s apart`;
  return Object.fromEntries([...longest].map(([name, r]) => [name, line(r)]));
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

const url = new URL(postgresUrl);
url.searchParams.set('application_name', applicationName);

function spawnInstance(instance: Instance): Promise<void> {
  const child = fork(join(here, 'chaos-instance.ts'), [], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
    env: {
      ...process.env,
      PORT: String(instance.port),
      DATABASE_URL: url.toString(),
      INBOX_SCHEMA: inboxSchema,
      LEDGER_SCHEMA: ledgerSchema,
      GAP_TIMEOUT_MS: String(gapTimeoutMs),
      HANDLER_DELAY_MS: '3',
      REDIS_URL: privateRedis?.url ?? '',
      FRAMEWORK: instance.framework,
      MODE: instance.mode,
      RETENTION_MS: retentionS === undefined ? '' : String(retentionS * 1000),
      CITUS: citus ? '1' : '',
    },
  });
  instance.child = child;
  // The tail of its stderr, shown if it crashes.
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const calls = new Map<number, (v: any) => void>();
  let nextId = 0;
  child.on('message', (m: any) => {
    calls.get(m.id)?.(m);
    calls.delete(m.id);
  });
  instance.call = (cmd: string) =>
    new Promise((resolve) => {
      const id = nextId++;
      calls.set(id, resolve);
      child.send({ cmd, id }, (err) => err && resolve(undefined));
      setTimeout(() => resolve(undefined), 500);
    });
  let ready = false;
  return new Promise((resolve, reject) => {
    child.once('message', () => {
      instance.alive = ready = true;
      resolve();
    });
    child.once('exit', (code, signal) => {
      instance.alive = false;
      if (signal === 'SIGKILL' || stopping) return;
      if (!ready) {
        // Its start failed (a terminated connection, say): restarted, as a supervisor would.
        bump('restart-retried');
        reject(new Error(`${instance.name} exited with ${code ?? signal} while starting`));
      } else {
        // A running instance died without our SIGKILL: that is a finding. Restarted, and on.
        bump('unexpected-exit');
        crashes.push(`${instance.name} exited with ${code ?? signal}`);
        log(`${instance.name} CRASHED (exit ${code ?? signal}); restarting. Its stderr:\n${stderr}`);
      }
      setTimeout(() => void spawnInstance(instance).catch(() => {}), 300);
    });
  });
}

async function kill(instances: Instance[]): Promise<void> {
  const alive = instances.filter((i) => i.alive);
  if (alive.length < instances.length) return; // one down at a time: two keep serving
  const victim = alive[Math.floor(Math.random() * alive.length)];
  // Aim: alternate between waiting for a drain in flight and a handler in flight (up to 1 s).
  const wantDrain = (faults['kill-mid-drain'] ?? 0) <= (faults['kill-mid-handler'] ?? 0);
  let state: { handlers: number; drains: number } | undefined;
  const until = Date.now() + 1000;
  do {
    state = await victim.call?.('inflight');
    if (state && (wantDrain ? state.drains > 0 : state.handlers > 0)) break;
    await new Promise((r) => setTimeout(r, 5));
  } while (Date.now() < until);
  victim.alive = false;
  victim.child?.kill('SIGKILL');
  bump('sigkill');
  if (state?.drains) bump('kill-mid-drain');
  if (state?.handlers) bump('kill-mid-handler');
  const seen = `handlers in flight ${state?.handlers ?? '?'}, drains ${state?.drains ?? '?'}`;
  log(`SIGKILL ${victim.name} (${seen})`);
  setTimeout(
    () => void spawnInstance(victim).catch((err) => log(`restart of ${victim.name} failed: ${err.message}`)),
    500 + Math.random() * 1000,
  );
}

/** Up to three of our instances' connections (by this run's application_name). */
async function terminateBackends(admin: pg.Pool): Promise<void> {
  const { rows } = await admin.query(
    `select pg_terminate_backend(pid) as ok from (
       select pid from pg_stat_activity where application_name = $1 order by random() limit 3) x`,
    [applicationName],
  );
  for (const r of rows) if (r.ok) bump('pg-terminate-backend');
}

/** The workers of shared/citus/cluster.sh, in turn: stopped as by a crash, started again. */
const citusWorkers = ['citus1', 'citus2'];
const pgCtlCluster = (...args: string[]) =>
  new Promise<void>((resolve, reject) =>
    execFile('pg_ctlcluster', ['15', ...args], (err) => (err ? reject(err) : resolve())),
  );
async function restartCitusWorker(): Promise<void> {
  const worker = citusWorkers[(faults['citus-worker-restart'] ?? 0) % citusWorkers.length];
  log(`stopping Citus worker ${worker} (immediate)`);
  await pgCtlCluster(worker, 'stop', '-m', 'immediate');
  await new Promise((r) => setTimeout(r, 1000 + Math.random() * 2000));
  await pgCtlCluster(worker, 'start');
  log(`Citus worker ${worker} started again`);
}

async function restartRedis(redis: PrivateRedis): Promise<void> {
  await redis.stop();
  bump('redis-stop');
  log('Redis stopped');
  await new Promise((r) => setTimeout(r, 500 + Math.random() * 1500));
  await redis.start();
  log('Redis started again');
}

function events() {
  const ordered = new Map<string, ChaosEvent[]>();
  for (let k = 0; k < plan.keys; k++) {
    const key = `${run}-k${k}`;
    const event = (seq: number) => ({ id: `${key}-${seq}`, key, seq, body: JSON.stringify({ amount: seq }) });
    const seqs = Array.from({ length: plan.seqs }, (_, i) => event(i + 1));
    ordered.set(key, seqs);
  }
  const unordered: ChaosEvent[] = Array.from({ length: plan.unordered }, (_, i) => ({
    id: `${run}-u${i}`,
    body: JSON.stringify({ account: `${run}-a${i % 100}`, amount: 1 }),
  }));
  // Poison: a non-integer amount, which the ledger rejects (dead-lettered as rejected).
  const poison = new Set(Array.from({ length: plan.poison }, (_, i) => `${run}-p${i}`));
  for (const id of poison)
    unordered.push({ id, body: JSON.stringify({ account: `${run}-a0`, amount: 'poison' }) });
  return { ordered, unordered, poison };
}

const admin = new pg.Pool({ connectionString: postgresUrl, max: 2 });
admin.on('error', () => {});
const instances: Instance[] = [];
let proxy: FaultProxy | undefined;
let balancer: Balancer | undefined;
const violations: string[] = [];
let exitCode = 0;
try {
  // Migrate once, before the instances race to.
  const setup = createInbox({
    db: postgresUrl,
    schema: inboxSchema,
    sweepIntervalMs: 0,
    handle: () => {},
    ...(citus ? { citus: {} } : {}),
  });
  const ledger = new Ledger(ledgerSchema);
  await ledger.setup(await setup.kysely());
  if (citus) await ledger.distribute(await setup.kysely(), `${inboxSchema}.events`);
  await setup.close();

  for (const [i, framework] of FRAMEWORKS.entries()) {
    const mode = i === FRAMEWORKS.length - 1 ? 'deferred' : 'inline';
    const name = mode === 'deferred' ? `${framework} (deferred)` : framework;
    instances.push({ name, framework, mode, port: await freePort(), alive: false });
  }
  await Promise.all(instances.map(spawnInstance));
  balancer = await startBalancer(() => instances.filter((i) => i.alive).map((i) => i.port));
  proxy = await createFaultProxy({
    target: balancer.url,
    seed: Number.parseInt(run.slice(-6), 16),
    rates,
    maxDelayMs: 80,
    dropModes: ['reset', '502'],
  });
  const { ordered, unordered, poison } = events();
  const total = plan.keys * plan.seqs + unordered.length;
  log(
    `${ci ? 'CI' : 'full'} mode: ${instances.length} instances (${instances.map((i) => i.name).join(', ')}), ${plan.keys} keys × ${plan.seqs} seqs + ${unordered.length} unordered (${plan.poison} poison) = ${total} events; schema ${inboxSchema}` +
      (citus
        ? `; the Citus cluster's coordinator (never restarted), a worker restarted every ~${faultEveryMs.workerRestart / 1000} s`
        : privatePostgres
          ? `; a private PostgreSQL, restarted every ~${faultEveryMs.postgresRestart / 1000} s`
          : '; the shared PostgreSQL (never restarted)') +
      (privateRedis
        ? `; a private Redis, restarted every ~${faultEveryMs.redisRestart / 1000} s`
        : '; no Redis'),
  );

  const started = Date.now();
  let sending = true;
  const sent = send(ordered, unordered, {
    port: Number(new URL(proxy.url).port),
    concurrency: plan.concurrency,
    window: plan.window,
    deadline: started + plan.minutes * 60_000,
  }).finally(() => {
    sending = false;
  });
  /** Runs `fault` until the sender is done, `delay(n)` ms before its nth run. */
  const repeat = async (delay: (n: number) => number, fault: () => Promise<unknown>) => {
    for (let n = 0; sending; n++) {
      await new Promise((r) => setTimeout(r, delay(n)));
      if (sending) await fault();
    }
  };
  const jittered = (every: number) => () => every * (0.5 + Math.random());
  const loops = [
    repeat(jittered(faultEveryMs.kill), () => kill(instances)),
    repeat(jittered(faultEveryMs.terminate), () => terminateBackends(admin).catch(() => {})),
  ];
  const restartDatabase = citus
    ? { kind: 'citus-worker-restart', run: restartCitusWorker, every: faultEveryMs.workerRestart }
    : privatePostgres && {
        kind: 'postgres-restart',
        run: () => privatePostgres.restart(),
        every: faultEveryMs.postgresRestart,
      };
  if (restartDatabase) {
    // The first restart early, so that even a short run has one.
    const { every } = restartDatabase;
    const restart = () => {
      log(`${restartDatabase.kind}`);
      return restartDatabase.run().then(
        () => bump(restartDatabase.kind),
        (err) => log(`${restartDatabase.kind} failed: ${err.message}`),
      );
    };
    loops.push(repeat((n) => (n === 0 ? every * 0.4 : every * (0.5 + Math.random())), restart));
  }
  // Every 10 s, the events table's size and each instance process's RSS.
  let eventsRowsMost = 0;
  const sample = async () => {
    for (const instance of instances) sampleRss(instance);
    const r = await admin
      .query(`select count(*)::int as n from "${inboxSchema}".events`)
      .catch(() => undefined); // PostgreSQL restarting
    if (r) eventsRowsMost = Math.max(eventsRowsMost, r.rows[0].n);
  };
  loops.push(
    (async () => {
      while (sending) await new Promise((r) => setTimeout(r, 10_000)).then(sample);
    })(),
  );
  if (privateRedis) {
    const restart = () =>
      restartRedis(privateRedis).catch((err) => log(`Redis restart failed: ${err.message}`));
    loops.push(repeat(jittered(faultEveryMs.redisRestart), restart));
  }
  const stats = await sent;
  await Promise.all(loops);
  log(
    `sender done in ${Math.round((Date.now() - started) / 1000)} s: ${stats.attempts} attempts, ${stats.acknowledged} acknowledged`,
  );

  /** This run's ids, and the first row of a query over them (`$1`). */
  const mine = `${run}-%`;
  const first = async (text: string, ...params: unknown[]) =>
    (await admin.query(text, [mine, ...params])).rows[0];
  const inboxEvents = `"${inboxSchema}".events`;

  // Let the sweepers finish what kills interrupted, then wait for the buffer to empty.
  const quietUntil = Date.now() + gapTimeoutMs + 10_000;
  let held = -1;
  while (Date.now() < quietUntil) {
    const waiting = `select count(*)::int as n from ${inboxEvents} where status in ('held', 'pending')`;
    held = (await admin.query(waiting)).rows[0].n;
    if (held === 0) break;
    await new Promise((r) => setTimeout(r, 250));
  }

  const entries = await admin.query(
    `select key, event_id, seq, amount from "${ledgerSchema}".entries where event_id like $1 order by n`,
    [mine],
  );
  const appliedCount = new Map<string, number>();
  const seqsByKey = new Map<string, number[]>();
  for (const e of entries.rows) {
    appliedCount.set(e.event_id, (appliedCount.get(e.event_id) ?? 0) + 1);
    if (e.seq === null) continue;
    if (!seqsByKey.has(e.key)) seqsByKey.set(e.key, []);
    seqsByKey.get(e.key)!.push(Number(e.seq));
  }
  const expected = [...[...ordered.values()].flat(), ...unordered].filter((e) => !poison.has(e.id));
  let lost = 0;
  let doubleApplied = 0;
  for (const e of expected) {
    const n = appliedCount.get(e.id) ?? 0;
    if (n === 0) lost++;
    if (n > 1) doubleApplied += n - 1;
  }
  // Out of order: an entry whose seq is not above the one before it on its key (a missing one is lost).
  let outOfOrder = 0;
  for (const [key, seqs] of seqsByKey) {
    seqs.forEach((s, i) => {
      if (i > 0 && s <= seqs[i - 1]) outOfOrder++;
    });
    if (seqs.length !== plan.seqs) violations.push(`key ${key}: ${seqs.length} of ${plan.seqs} seqs applied`);
  }
  const appliedPoison = [...poison].filter((id) => appliedCount.has(id)).length;
  // Balances: each ordered key's balance is the sum of its amounts, applied once.
  const balances = await admin.query(
    `select key, balance from "${ledgerSchema}".accounts where key like $1`,
    [`${run}-k%`],
  );
  const wantBalance = (plan.seqs * (plan.seqs + 1)) / 2;
  const wrongBalances = balances.rows.filter((r) => Number(r.balance) !== wantBalance).length;

  const status = await admin.query(
    `select status, coalesce(dead_reason, '') as reason, count(*)::int as n from ${inboxEvents}
      where id like $1 group by 1, 2`,
    [mine],
  );
  const byStatus = Object.fromEntries(
    status.rows.map((r) => [`${r.status}${r.reason ? `:${r.reason}` : ''}`, r.n]),
  );
  const dead = await admin.query(
    `select id, dead_reason from ${inboxEvents} where id like $1 and status = 'dead'`,
    [mine],
  );
  const unexplained = dead.rows.filter((r) => !(poison.has(r.id) && r.dead_reason === 'rejected'));
  const missingPoison = [...poison].filter((id) => !dead.rows.some((r) => r.id === id));
  const stillHeld = await first(
    `select count(*)::int as n from ${inboxEvents} where id like $1 and status in ('held', 'pending')
        and received_at < now() - $2 * interval '1 millisecond'`,
    gapTimeoutMs,
  );
  const gaps = await first(`select count(*)::int as n from "${inboxSchema}".gaps where key like $1`);

  if (lost) violations.push(`${lost} events lost (acknowledged, never applied)`);
  if (doubleApplied) violations.push(`${doubleApplied} events applied more than once`);
  if (outOfOrder) violations.push(`${outOfOrder} entries out of seq order`);
  if (appliedPoison) violations.push(`${appliedPoison} poison events applied`);
  if (wrongBalances) violations.push(`${wrongBalances} ordered accounts with a wrong balance`);
  if (held !== 0) violations.push(`${held} events still held/pending at the end`);
  if (stillHeld.n) violations.push(`${stillHeld.n} events held past the gap timeout`);
  const some = unexplained.slice(0, 3).map((r) => `${r.id}:${r.dead_reason}`);
  if (unexplained.length)
    violations.push(`${unexplained.length} unexplained dead letters (${some.join(', ')})`);
  if (missingPoison.length) violations.push(`${missingPoison.length} rejected events not dead-lettered`);
  // The state invariants of the inbox's tables (ARCHITECTURE.md, "Invariants").
  const broken = await checkInvariants(admin, { schema: inboxSchema });
  for (const v of broken.slice(0, 10))
    violations.push(`invariant ${v.rule}: key ${v.key}, seq ${v.seq}, ids ${v.ids.join(',')}`);
  if (broken.length > 10) violations.push(`${broken.length - 10} more invariant violations`);
  if (gaps.n) violations.push(`${gaps.n} gaps skipped (an event was given up on)`);
  if (crashes.length)
    violations.push(`${crashes.length} instance crashes: ${crashes.slice(0, 3).join('; ')}`);
  if (stats.acknowledged + stats.refused.length !== total)
    violations.push(`${total - stats.acknowledged - stats.refused.length} events never acknowledged`);
  // 422 is final for a sender: only the events the handler rejects on purpose may get it.
  const wronglyRefused = stats.refused.filter((id) => !poison.has(id));
  if (wronglyRefused.length)
    violations.push(`${wronglyRefused.length} events refused 422 that are not rejected on purpose`);

  const proxyStats = proxy.stats();
  const deliveries = proxyStats.forwarded;
  const drained = [...balancer.heldIds].filter((id) => appliedCount.get(id) === 1).length;
  const summary = {
    mode: `${ci ? 'ci' : 'full'}${citus ? ', Citus' : ''}`,
    seconds: Math.round((Date.now() - started) / 1000),
    events: total,
    deliveries,
    'sender attempts': stats.attempts,
    'sender retries': stats.retries,
    'refused (422, rejected on purpose)': stats.refused.length,
    'slowest acknowledgement': `${stats.slowest.id} after ${stats.slowest.attempts} attempts, ${(stats.slowest.ms / 1000).toFixed(1)} s`,
    'faults injected': {
      ...faults,
      ...Object.fromEntries(Object.entries(proxyStats.injected).map(([k, v]) => [`proxy-${k}`, v])),
      'instance-down (502 from the balancer)': balancer.upstreamDown,
    },
    'outcomes answered': proxyStats.outcomes,
    'duplicates absorbed': proxyStats.outcomes.duplicate ?? 0,
    held: balancer.heldIds.size,
    drained,
    'dead-lettered': dead.rows.length,
    'dead letters explained (rejected, injected)': `${dead.rows.length - unexplained.length} of ${dead.rows.length} (${poison.size} injected)`,
    'inbox rows by status': byStatus,
    retention: retentionS === undefined ? 'the default (7 days)' : `${retentionS} s`,
    'events table rows (most seen, sampled every 10 s)': eventsRowsMost,
    'instance RSS (the longest-lived process of each)': rssSummary(),
    lost,
    'double-applied': doubleApplied,
    'out-of-order': outOfOrder,
    'invariant violations': broken.length,
    violations: violations.length,
  };
  console.log(JSON.stringify(summary, null, 2));
  if (!ci) {
    mkdirSync(join(here, 'results'), { recursive: true });
    writeFileSync(
      join(here, 'results', citus ? 'chaos-citus-latest.json' : 'chaos-latest.json'),
      `${JSON.stringify({ at: new Date().toISOString(), ...summary }, null, 2)}\n`,
    );
  }
  if (violations.length) {
    for (const v of violations) console.error(`VIOLATION: ${v}`);
    exitCode = 1;
  } else {
    console.log(`chaos: ${deliveries} deliveries, 0 violations`);
  }
} catch (err) {
  console.error('chaos: failed', err);
  exitCode = 1;
} finally {
  stopping = true;
  for (const i of instances) {
    i.alive = false;
    i.child?.kill('SIGKILL');
  }
  await proxy?.close();
  await balancer?.close();
  if (!argv.includes('--keep')) {
    await admin.query(`drop schema if exists "${inboxSchema}" cascade`).catch(() => {});
    await admin.query(`drop schema if exists "${ledgerSchema}" cascade`).catch(() => {});
  }
  await admin.end();
  await privateRedis?.destroy();
  await privatePostgres?.destroy();
  process.exit(exitCode);
}
