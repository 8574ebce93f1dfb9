/**
 * `npm run chaos`: proves that nothing is lost, applied twice or applied out of order while
 * instances die, connections are cut, the database and Redis restart, and the network
 * misbehaves.
 *
 *   npm run chaos -- --ci                      a few thousand deliveries, under 3 minutes (.ci/run)
 *   npm run chaos                              full: ≥ 100,000 deliveries
 *   npm run chaos -- --deliveries 100000       about that many events (sized plan and deadline)
 *   npm run chaos -- --shared-postgres         on DATABASE_URL instead of a private cluster
 *                                              (then PostgreSQL is never restarted)
 *   npm run chaos -- --deliveries 1000000 --retention-s 300
 *                                              the soak: retention short enough to prune during
 *                                              the run (longer than any acknowledgement takes, or
 *                                              a retry of a pruned unordered event is applied
 *                                              again); the events table's size is sampled
 *
 * By default the suite starts servers of its own (test/support/private-servers.ts): a
 * throwaway PostgreSQL cluster and a redis-server on free ports, never the shared ones, and
 * restarts them among its faults. Three instances of the ledger app (child processes) share
 * that PostgreSQL (schemas of their own) and Redis (the duplicates fast path); the project's
 * fault proxy (src/testing) sits in front of a small balancer over them; a sender pushes
 * ordered events over hundreds of keys and unordered events, retrying each until it gets a
 * 2xx. Meanwhile: SIGKILL of a random instance (aimed mid-handler or mid-drain, restarted
 * after a moment), pg_terminate_backend on the instances' own connections (found by
 * application_name), PostgreSQL restarts (`pg_ctl restart -m fast`), Redis killed and started
 * again, and at the proxy 500s, lost acks, duplicates and delays. Events the handler rejects
 * (RejectEvent: a non-integer amount) are sent on purpose. Then the ledger and the inbox are
 * read back and every guarantee is checked; any violation exits non-zero.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Ledger } from '../examples/ledger/ledger.js';
import { FRAMEWORKS, type Framework } from '../examples/ledger/start.js';
import { createInbox } from '../src/index.js';
import { checkInvariants, createFaultProxy, type FaultProxy } from '../src/testing/index.js';
import {
  type PrivatePostgres,
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
const sharedPostgres = argv.includes('--shared-postgres') || !postgresBinariesAvailable();
function value(name: string): number | undefined {
  const i = argv.indexOf(`--${name}`);
  if (i < 0) return undefined;
  const n = Number(argv[i + 1]);
  if (!Number.isSafeInteger(n) || n < 1) {
    console.error(`chaos: --${name} must be a positive integer; got ${JSON.stringify(argv[i + 1])}`);
    process.exit(2);
  }
  return n;
}

// Servers of the suite's own, to restart; the shared PostgreSQL only with --shared-postgres.
const privatePostgres: PrivatePostgres | undefined = sharedPostgres
  ? undefined
  : await startPrivatePostgres();
const privateRedis: PrivateRedis | undefined = redisServerAvailable() ? await startPrivateRedis() : undefined;
const postgresUrl =
  privatePostgres?.url ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const run = `chaos_${randomBytes(3).toString('hex')}`;
const applicationName = `webhook-inbox-${run}`;
const inboxSchema = `${run}_inbox`;
const ledgerSchema = `${run}_ledger`;
// The instances' `retention` (--retention-s), else the inbox's default (7 days: nothing pruned).
const retentionS = value('retention-s');
// Longer than any retry chain the faults below cause on a busy machine: a gap that times out
// is the inbox giving up on an event (by design, dead-lettered as late when it comes), and
// this suite must see none.
const gapTimeoutMs = 60_000;

const plan = ci
  ? // A few thousand deliveries; on an idle 2-core machine well under 3 minutes. The sender's
    // deadline is looser so that a busy CI machine is slow rather than red.
    { keys: 120, seqs: 10, unordered: 900, poison: 8, concurrency: 48, window: 3, minutes: 4 }
  : { keys: 500, seqs: 120, unordered: 30_000, poison: 40, concurrency: 48, window: 4, minutes: 40 };
const targetEvents = value('deliveries');
if (targetEvents !== undefined) {
  // About `deliveries` events: 70 % ordered over `keys` keys, the rest unordered; the deadline
  // grows with the size (some 40 minutes per 100,000 on a quiet 2-core machine).
  plan.seqs = Math.max(1, Math.round((targetEvents * 0.7) / plan.keys));
  plan.unordered = Math.max(0, targetEvents - plan.keys * plan.seqs);
  plan.minutes = Math.max(plan.minutes, Math.ceil((targetEvents / 100_000) * 40) + 5);
}
plan.keys = value('keys') ?? plan.keys;
plan.seqs = value('seqs') ?? plan.seqs;
plan.unordered = value('unordered') ?? plan.unordered;
const faultEveryMs = {
  kill: ci ? 4000 : 6000,
  terminate: ci ? 3000 : 4000,
  postgresRestart: ci ? 10_000 : 60_000,
  redisRestart: ci ? 6_000 : 20_000,
};
// At the fault proxy, per request: never forwarded (connection reset or 502), applied but the
// answer lost, forwarded twice, delayed, overtaken by a later request, answered 500.
const rates = { drop: 0.02, dropResponse: 0.03, duplicate: 0.05, delay: 0.1, reorder: 0.05, error: 0.03 };

const faults: Record<string, number> = {};
const crashes: string[] = [];
let stopping = false;
const bump = (kind: string) => {
  faults[kind] = (faults[kind] ?? 0) + 1;
};
const log = (msg: string) => console.log(`chaos ${new Date().toISOString().slice(11, 19)} ${msg}`);

// ---- instances -------------------------------------------------------------------------------
interface Instance {
  name: string;
  framework: Framework;
  /** The last instance runs in deferred mode: its claims go in batches, its workers apply. */
  mode: 'inline' | 'deferred';
  port: number;
  child?: ChildProcess;
  alive: boolean;
  calls: Map<number, (v: any) => void>;
}

/** RSS samples (MiB) of each instance process, by pid: the first taken, the last, the most. */
const rssByProcess = new Map<
  number,
  { instance: string; first: number; last: number; most: number; samples: number }
>();
function sampleRss(instance: Instance): void {
  const pid = instance.child?.pid;
  if (!instance.alive || pid === undefined) return;
  let kb: number;
  try {
    kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  } catch {
    return; // gone between the check and the read (killed), or no /proc on this system
  }
  if (!Number.isFinite(kb)) return;
  const mib = Math.round(kb / 1024);
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

/** Each instance's longest-sampled process: its RSS at the first sample, the last and the most. */
function rssSummary(): Record<string, string> {
  const longest = new Map<string, { first: number; last: number; most: number; samples: number }>();
  for (const r of rssByProcess.values()) {
    if ((longest.get(r.instance)?.samples ?? 0) < r.samples) longest.set(r.instance, r);
  }
  return Object.fromEntries(
    [...longest].map(([name, r]) => [
      name,
      `${r.first} -> ${r.last} MiB (most ${r.most}) over ${r.samples} samples, 10 s apart`,
    ]),
  );
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
    },
  });
  instance.child = child;
  // Keep the tail of its stderr, to show when it crashes (a SIGKILLed instance says nothing).
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  instance.calls = new Map();
  let nextId = 0;
  child.on('message', (m: any) => {
    if (m.id !== undefined) {
      instance.calls.get(m.id)?.(m);
      instance.calls.delete(m.id);
    }
  });
  (instance as any).call = (cmd: string) =>
    new Promise((resolve) => {
      const id = nextId++;
      instance.calls.set(id, resolve);
      child.send({ cmd, id }, (err) => err && resolve(undefined));
      setTimeout(() => resolve(undefined), 500);
    });
  return new Promise((resolve, reject) => {
    child.once('message', () => {
      instance.alive = true;
      resolve();
    });
    let ready = false;
    child.once('message', () => {
      ready = true;
    });
    child.once('exit', (code, signal) => {
      instance.alive = false;
      if (signal === 'SIGKILL' || stopping) return;
      if (!ready) {
        // Its start failed (say, a terminated connection during its migrations check): a
        // supervisor restarts it, as one would in production.
        bump('restart-retried');
        reject(new Error(`${instance.name} exited with ${code ?? signal} while starting`));
        setTimeout(() => void spawnInstance(instance).catch(() => {}), 300);
        return;
      }
      // A running instance died without our SIGKILL: that is a finding. Restart it and go on.
      bump('unexpected-exit');
      crashes.push(`${instance.name} exited with ${code ?? signal}`);
      log(`${instance.name} CRASHED (exit ${code ?? signal}); restarting. Its stderr:\n${stderr}`);
      setTimeout(() => void spawnInstance(instance).catch(() => {}), 300);
    });
  });
}

async function inflight(instance: Instance): Promise<{ handlers: number; drains: number } | undefined> {
  return (instance as any).call?.('inflight');
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
    state = await inflight(victim);
    if (state && (wantDrain ? state.drains > 0 : state.handlers > 0)) break;
    await new Promise((r) => setTimeout(r, 5));
  } while (Date.now() < until);
  victim.alive = false;
  victim.child?.kill('SIGKILL');
  bump('sigkill');
  if (state?.drains) bump('kill-mid-drain');
  if (state?.handlers) bump('kill-mid-handler');
  log(
    `SIGKILL ${victim.name} (handlers in flight ${state?.handlers ?? '?'}, drains ${state?.drains ?? '?'})`,
  );
  // Restarted after a moment, in the background: the kills go on meanwhile.
  setTimeout(
    () => void spawnInstance(victim).catch((err) => log(`restart of ${victim.name} failed: ${err.message}`)),
    500 + Math.random() * 1000,
  );
}

async function terminateBackends(admin: pg.Pool): Promise<void> {
  // Only our instances' connections: they carry this run's application_name.
  const { rows } = await admin.query(
    `select pg_terminate_backend(pid) as ok from (
       select pid from pg_stat_activity where application_name = $1 order by random() limit 3) x`,
    [applicationName],
  );
  for (const r of rows) if (r.ok) bump('pg-terminate-backend');
}

async function restartRedis(redis: PrivateRedis): Promise<void> {
  await redis.stop();
  bump('redis-stop');
  log('Redis stopped');
  // Down for a moment, then back, empty: the instances reconnect by themselves.
  await new Promise((r) => setTimeout(r, 500 + Math.random() * 1500));
  await redis.start();
  log('Redis started again');
}

// ---- events ----------------------------------------------------------------------------------
function events() {
  const ordered = new Map<string, ChaosEvent[]>();
  for (let k = 0; k < plan.keys; k++) {
    const key = `${run}-k${k}`;
    ordered.set(
      key,
      Array.from({ length: plan.seqs }, (_, i) => ({
        id: `${key}-${i + 1}`,
        key,
        seq: i + 1,
        body: JSON.stringify({ amount: i + 1 }),
      })),
    );
  }
  const unordered: ChaosEvent[] = [];
  for (let i = 0; i < plan.unordered; i++) {
    unordered.push({
      id: `${run}-u${i}`,
      body: JSON.stringify({ account: `${run}-a${i % 100}`, amount: 1 }),
    });
  }
  const poison = new Set<string>();
  for (let i = 0; i < plan.poison; i++) {
    const id = `${run}-p${i}`;
    poison.add(id);
    // The ledger rejects a non-integer amount (RejectEvent): dead-lettered at once, as rejected.
    unordered.push({ id, body: JSON.stringify({ account: `${run}-a0`, amount: 'poison' }) });
  }
  return { ordered, unordered, poison };
}

// ---- main ------------------------------------------------------------------------------------
const admin = new pg.Pool({ connectionString: postgresUrl, max: 2 });
admin.on('error', () => {});
const instances: Instance[] = [];
let proxy: FaultProxy | undefined;
let balancer: Balancer | undefined;
const violations: string[] = [];
let exitCode = 0;
try {
  // Migrate once, before the instances race to.
  const setup = createInbox({ db: postgresUrl, schema: inboxSchema, sweepIntervalMs: 0, handle: () => {} });
  await new Ledger(ledgerSchema).setup(await setup.kysely());
  await setup.close();

  for (const [i, framework] of FRAMEWORKS.entries()) {
    const mode = i === FRAMEWORKS.length - 1 ? 'deferred' : 'inline';
    instances.push({
      name: mode === 'deferred' ? `${framework} (deferred)` : framework,
      framework,
      mode,
      port: await freePort(),
      alive: false,
      calls: new Map(),
    });
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
      (privatePostgres
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
  const loops = [
    (async () => {
      while (sending) {
        await new Promise((r) => setTimeout(r, faultEveryMs.kill * (0.5 + Math.random())));
        if (sending) await kill(instances);
      }
    })(),
    (async () => {
      while (sending) {
        await new Promise((r) => setTimeout(r, faultEveryMs.terminate * (0.5 + Math.random())));
        if (sending) await terminateBackends(admin).catch(() => {});
      }
    })(),
  ];
  if (privatePostgres) {
    loops.push(
      (async () => {
        // The first one early, so that even a short run has one.
        for (let n = 0; sending; n++) {
          const every = faultEveryMs.postgresRestart;
          await new Promise((r) => setTimeout(r, n === 0 ? every * 0.4 : every * (0.5 + Math.random())));
          if (!sending) break;
          log('restarting PostgreSQL');
          await privatePostgres.restart().then(
            () => bump('postgres-restart'),
            (err) => log(`PostgreSQL restart failed: ${err.message}`),
          );
        }
      })(),
    );
  }
  // The events table's size, every 10 s: bounded by retention when --retention-s prunes it.
  // And each instance process's RSS beside it: a soak shows a leak as a process whose RSS
  // climbs sample after sample (a SIGKILLed instance starts a new process, with its own line).
  let eventsRowsMost = 0;
  loops.push(
    (async () => {
      while (sending) {
        await new Promise((r) => setTimeout(r, 10_000));
        for (const instance of instances) sampleRss(instance);
        const r = await admin
          .query(`select count(*)::int as n from "${inboxSchema}".events`)
          .catch(() => undefined); // PostgreSQL restarting
        if (r) eventsRowsMost = Math.max(eventsRowsMost, r.rows[0].n);
      }
    })(),
  );
  if (privateRedis) {
    loops.push(
      (async () => {
        while (sending) {
          await new Promise((r) => setTimeout(r, faultEveryMs.redisRestart * (0.5 + Math.random())));
          if (sending)
            await restartRedis(privateRedis).catch((err) => log(`Redis restart failed: ${err.message}`));
        }
      })(),
    );
  }
  const stats = await sent;
  await Promise.all(loops);
  log(
    `sender done in ${Math.round((Date.now() - started) / 1000)} s: ${stats.attempts} attempts, ${stats.acknowledged} acknowledged`,
  );

  // Let the sweepers finish what kills interrupted, then wait for the buffer to empty.
  const quietUntil = Date.now() + gapTimeoutMs + 10_000;
  let held = -1;
  while (Date.now() < quietUntil) {
    const r = await admin.query(
      `select count(*)::int as n from "${inboxSchema}".events where status in ('held', 'pending')`,
    );
    held = r.rows[0].n;
    if (held === 0) break;
    await new Promise((r) => setTimeout(r, 250));
  }

  // ---- read back -----------------------------------------------------------------------------
  const entries = await admin.query(
    `select key, event_id, seq, amount from "${ledgerSchema}".entries where event_id like $1 order by n`,
    [`${run}-%`],
  );
  const appliedCount = new Map<string, number>();
  const seqsByKey = new Map<string, number[]>();
  for (const e of entries.rows) {
    appliedCount.set(e.event_id, (appliedCount.get(e.event_id) ?? 0) + 1);
    if (e.seq !== null) {
      const list = seqsByKey.get(e.key) ?? [];
      list.push(Number(e.seq));
      seqsByKey.set(e.key, list);
    }
  }
  const expected = [...[...ordered.values()].flat(), ...unordered].filter((e) => !poison.has(e.id));
  let lost = 0;
  let doubleApplied = 0;
  for (const e of expected) {
    const n = appliedCount.get(e.id) ?? 0;
    if (n === 0) lost++;
    if (n > 1) doubleApplied += n - 1;
  }
  // Out of order: an entry whose seq is not above the one applied before it on its key.
  // (A missing seq is counted as lost, and as a key with too few seqs, not here.)
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
    `select status, coalesce(dead_reason, '') as reason, count(*)::int as n from "${inboxSchema}".events
      where id like $1 group by 1, 2`,
    [`${run}-%`],
  );
  const byStatus = Object.fromEntries(
    status.rows.map((r) => [`${r.status}${r.reason ? `:${r.reason}` : ''}`, r.n]),
  );
  const dead = await admin.query(
    `select id, dead_reason from "${inboxSchema}".events where id like $1 and status = 'dead'`,
    [`${run}-%`],
  );
  const unexplained = dead.rows.filter((r) => !(poison.has(r.id) && r.dead_reason === 'rejected'));
  const missingPoison = [...poison].filter((id) => !dead.rows.some((r) => r.id === id));
  const stillHeld = await admin.query(
    `select count(*)::int as n from "${inboxSchema}".events where id like $1 and status in ('held', 'pending')
        and received_at < now() - $2 * interval '1 millisecond'`,
    [`${run}-%`, gapTimeoutMs],
  );
  const gaps = await admin.query(`select count(*)::int as n from "${inboxSchema}".gaps where key like $1`, [
    `${run}-%`,
  ]);

  if (lost) violations.push(`${lost} events lost (acknowledged, never applied)`);
  if (doubleApplied) violations.push(`${doubleApplied} events applied more than once`);
  if (outOfOrder) violations.push(`${outOfOrder} entries out of seq order`);
  if (appliedPoison) violations.push(`${appliedPoison} poison events applied`);
  if (wrongBalances) violations.push(`${wrongBalances} ordered accounts with a wrong balance`);
  if (held !== 0) violations.push(`${held} events still held/pending at the end`);
  if (stillHeld.rows[0].n) violations.push(`${stillHeld.rows[0].n} events held past the gap timeout`);
  if (unexplained.length)
    violations.push(
      `${unexplained.length} unexplained dead letters (${unexplained
        .slice(0, 3)
        .map((r) => `${r.id}:${r.dead_reason}`)
        .join(', ')})`,
    );
  if (missingPoison.length) violations.push(`${missingPoison.length} rejected events not dead-lettered`);
  // The state invariants of the inbox's tables (ARCHITECTURE.md, "Invariants" 4): nothing
  // waiting below its cursor, no two events waiting at one seq, every dead letter explained.
  const broken = await checkInvariants(admin, { schema: inboxSchema });
  for (const v of broken.slice(0, 10)) {
    violations.push(`invariant ${v.rule}: key ${v.key}, seq ${v.seq}, ids ${v.ids.join(',')}`);
  }
  if (broken.length > 10) violations.push(`${broken.length - 10} more invariant violations`);
  if (gaps.rows[0].n) violations.push(`${gaps.rows[0].n} gaps skipped (an event was given up on)`);
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
    mode: ci ? 'ci' : 'full',
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
    const { writeFileSync, mkdirSync } = await import('node:fs');
    mkdirSync(join(here, 'results'), { recursive: true });
    writeFileSync(
      join(here, 'results', 'chaos-latest.json'),
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
