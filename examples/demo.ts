/**
 * `npm run demo`: exactly-once, in-order delivery surviving a hostile network.
 *
 * The ledger example (a deliberately non-idempotent `balance = balance + amount` handler) runs
 * behind the inbox on embedded PGlite (or `--db`); a fault proxy in front of it drops
 * requests and responses, duplicates, delays, reorders and fails deliveries; the sender pushes
 * thousands of events over hundreds of keys through it. At the end the ledger is read back
 * and checked: every event applied exactly once, every key in seq order, nothing lost.
 * Exit code 0 when every check passes, 1 when one fails, 2 for bad flags.
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { Worker } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';
import { sql } from 'kysely';
import { type FaultStats, seededRandom } from '../src/testing/index.js';
import type { TrafficInput, TrafficMessage, TrafficSnapshot } from './demo-traffic.js';
import { startLedger } from './ledger/start.js';
import { liveLine } from './live-line.js';

const HELP = `npm run demo -- [flags]

Pushes events through a fault proxy into the ledger example (behind webhook-inbox) and
verifies the ledger: every event applied exactly once, every key in order, nothing lost.

  --events <n>          events to send (default 2000)
  --keys <n>            ordering keys (accounts) they are spread over (default 200)
  --drop <rate>         requests dropped before the consumer: reset, 502 or silence (default 0.05)
  --drop-response <r>   responses lost AFTER the consumer processed the event (default 0.05)
  --duplicate <rate>    requests delivered twice (default 0.05)
  --reorder <rate>      requests delayed and overtaken by later ones (default 0.1)
  --error <rate>        requests answered 500 without reaching the consumer (default 0.05)
  --seed <n>            seed of the workload and of every fault (default 42)
  --concurrency <n>     keys delivered in parallel (default 16)
  --db <postgres url>   use this PostgreSQL instead of embedded PGlite (fresh schemas, dropped after)
  --help                this text
`;

function usage(message: string): never {
  process.stderr.write(`demo: ${message}\nSee \`npm run demo -- --help\` for the flags.\n`);
  process.exit(2);
}

function parseFlags() {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      options: {
        events: { type: 'string' },
        keys: { type: 'string' },
        drop: { type: 'string' },
        'drop-response': { type: 'string' },
        duplicate: { type: 'string' },
        reorder: { type: 'string' },
        error: { type: 'string' },
        seed: { type: 'string' },
        concurrency: { type: 'string' },
        db: { type: 'string' },
        help: { type: 'boolean' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    usage((err as Error).message);
  }
  if (values.help) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  const int = (name: string, fallback: number, min: number, max: number) => {
    const raw = values[name];
    if (raw === undefined) return fallback;
    if (typeof raw !== 'string' || !/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) {
      usage(`--${name} must be an integer from ${min} to ${max}; got ${JSON.stringify(raw)}`);
    }
    return Number(raw);
  };
  const rate = (name: string, fallback: number) => {
    const raw = values[name];
    if (raw === undefined) return fallback;
    const n = typeof raw === 'string' && /^(0(\.\d+)?|1(\.0+)?|\.\d+)$/.test(raw) ? Number(raw) : Number.NaN;
    if (!(n >= 0 && n <= 0.5)) usage(`--${name} must be a rate from 0 to 0.5; got ${JSON.stringify(raw)}`);
    return n;
  };
  const db = values.db;
  if (db !== undefined && (typeof db !== 'string' || !/^postgres(ql)?:\/\//.test(db))) {
    usage(`--db must be a postgres:// URL; got ${JSON.stringify(db)}`);
  }
  const events = int('events', 2000, 1, 1_000_000);
  const keys = int('keys', 200, 1, 100_000);
  return {
    events,
    keys: Math.min(keys, events),
    rates: {
      drop: rate('drop', 0.05),
      dropResponse: rate('drop-response', 0.05),
      duplicate: rate('duplicate', 0.05),
      reorder: rate('reorder', 0.1),
      error: rate('error', 0.05),
    },
    seed: int('seed', 42, 0, 2 ** 32 - 1),
    concurrency: int('concurrency', 16, 1, 1000),
    db: db as string | undefined,
  };
}

const flags = parseFlags();
const started = performance.now();
const tty = process.stdout.isTTY === true;
const seconds = () => ((performance.now() - started) / 1000).toFixed(1);
const cpuSeconds = () => {
  const { user, system } = process.cpuUsage();
  return ((user + system) / 1e6).toFixed(1);
};

// ---- the consumer, the network, the sender --------------------------------------------

const suffix = randomBytes(4).toString('hex');
const schemas = flags.db ? { inbox: `demo_inbox_${suffix}`, ledger: `demo_ledger_${suffix}` } : undefined;
// Embedded: one PGlite session with synchronous_commit off. A commit then skips its WAL flush,
// about half its cost, and loses nothing here: the database lives in memory and dies with the
// demo anyway.
const pglite = flags.db ? undefined : new PGlite();
if (pglite) await pglite.exec('set synchronous_commit = off');
const ledger = await startLedger({
  ledgerSchema: schemas?.ledger,
  inbox: {
    db: flags.db ?? pglite,
    schema: schemas?.inbox,
    // Short, so that anything held behind a gap would be resolved within the run.
    gapTimeoutMs: 2000,
    sweepIntervalMs: 250,
  },
}).catch((err) => {
  process.stderr.write(`demo: could not start the ledger: ${err.message}\n`);
  process.exit(1);
});
// ---- the workload ------------------------------------------------------------------------

interface Planned {
  id: string;
  key: string;
  amount: number;
}
const random = seededRandom(flags.seed);
const width = String(flags.keys).length;
const keyNames = Array.from({ length: flags.keys }, (_, i) => `acct-${String(i + 1).padStart(width, '0')}`);
const plan: Planned[] = Array.from({ length: flags.events }, (_, i) => {
  // Every key gets at least one event; the rest are spread at random.
  const key = i < flags.keys ? keyNames[i] : keyNames[Math.floor(random() * flags.keys)];
  const amount = Math.floor(random() * 1999) - 999 || 1;
  return { id: `evt-${flags.seed}-${String(i + 1).padStart(7, '0')}`, key, amount };
});

const mode = flags.db ? `PostgreSQL (${flags.db.replace(/\/\/[^@]*@/, '//')})` : 'embedded PGlite';
const r = flags.rates;
console.log(
  `webhook-inbox demo: ${flags.events} events over ${flags.keys} keys → fault proxy → ledger on ${mode}\n` +
    `faults: drop ${r.drop}, drop-response ${r.dropResponse}, duplicate ${r.duplicate}, ` +
    `reorder ${r.reorder}, error ${r.error} · seed ${flags.seed} · concurrency ${flags.concurrency}\n` +
    `ledger and inbox up in ${seconds()} s\n`,
);
const trafficStarted = performance.now();

// ---- live progress -------------------------------------------------------------------------

// A worker thread does not inherit tsx's loader hooks: it registers them, then loads the
// TypeScript module.
const traffic = new URL('./demo-traffic.ts', import.meta.url).href;
const tsxApi = import.meta.resolve('tsx/esm/api');
const worker = new Worker(
  `import(${JSON.stringify(tsxApi)}).then((m) => m.register()).then(() => import(${JSON.stringify(traffic)}))`,
  {
    eval: true,
    workerData: {
      target: ledger.url,
      seed: flags.seed,
      rates: { ...flags.rates, delay: flags.rates.reorder },
      concurrency: flags.concurrency,
      plan,
    } satisfies TrafficInput,
  },
);
let latest: TrafficSnapshot | undefined;
const finished = new Promise<Extract<TrafficMessage, { type: 'done' }>>((resolve, reject) => {
  worker.on('message', (m: TrafficMessage) => {
    latest = m;
    if (m.type === 'done') resolve(m);
  });
  worker.once('error', reject);
  worker.once('exit', (code) => reject(new Error(`the traffic worker exited with code ${code}`)));
});
function line(final = false): string {
  if (!latest) return `${seconds()}s │ starting the sender and the fault proxy…`;
  const s = latest.sender;
  const p = latest.proxy;
  const deadLetters = latest.deadLetters;
  const done = s.delivered + s.deadLettered;
  const share = done / flags.events;
  const bar = '█'.repeat(Math.round(share * 20)).padEnd(20, '·');
  const faults = Object.values(p.injected).reduce((a, b) => a + b, 0);
  return (
    `${final ? '' : bar + ' '}${String(Math.round(share * 100)).padStart(3)}% ${seconds()}s │ ` +
    `sent ${s.attempts} · acked ${s.delivered} · retries ${s.retried} · ` +
    `duplicates absorbed ${p.replayed} · held ${p.outcomes.held ?? 0} · dead letters ${deadLetters} · ` +
    `faults ${faults} · breaker ${s.breaker}`
  );
}
// On a terminal, rewritten in place and cut to its width; elsewhere, a plain line per second.
const live = liveLine(process.stdout, 1000);
const ticker = setInterval(() => live.tick(line()), tty ? 100 : 250);

const done = await finished.catch((err) => {
  process.stderr.write(`\ndemo: ${err.message}\n`);
  process.exit(1);
});
const { results, deadLetters } = done;
const sentAt = performance.now();
// Drains after the last responses, then anything held.
await ledger.inbox.idle();
for (let i = 0; i < 50 && (await ledger.inbox.held()).length > 0; i++) {
  await ledger.inbox.sweep();
  await ledger.inbox.idle();
}
clearInterval(ticker);
live.clear();
console.log(line(true));

// ---- verification, read back from the ledger ----------------------------------------------

const expected = new Map<string, Planned[]>();
const seqOf = new Map<string, number | null>();
for (const [i, e] of plan.entries()) {
  const list = expected.get(e.key) ?? [];
  list.push(e);
  expected.set(e.key, list);
  seqOf.set(e.id, results[i].seq);
}
let applied = 0;
let appliedTwice = 0;
let missing = 0;
let outOfOrderKeys = 0;
let wrongBalances = 0;
const seen = new Set<string>();
// GET /accounts/:key, straight to the ledger (not through the proxy): what a user would see.
const accounts = await Promise.all(
  keyNames.map(async (key) => {
    const res = await fetch(`${ledger.url}/accounts/${encodeURIComponent(key)}`);
    return (await res.json()) as {
      key: string;
      balance: number;
      entries: Array<{ id: string; seq: number; amount: number }>;
    };
  }),
);
for (const account of accounts) {
  const want = expected.get(account.key) ?? [];
  applied += account.entries.length;
  for (const entry of account.entries) {
    if (seen.has(entry.id)) appliedTwice++;
    seen.add(entry.id);
  }
  const wantIds = want.map((e) => e.id).join(',');
  const gotIds = account.entries.map((e) => e.id).join(',');
  const seqs = account.entries.map((e) => e.seq);
  const inOrder = seqs.every((s, i) => s === i + 1) && gotIds === wantIds;
  if (!inOrder) outOfOrderKeys++;
  if (account.balance !== want.reduce((sum, e) => sum + e.amount, 0)) wrongBalances++;
}
for (const e of plan) if (!seen.has(e.id)) missing++;
const held = (await ledger.inbox.held()).length;
const dead = (await ledger.inbox.deadLetters({ limit: 10_000 })).length;
const delivered = results.filter((x) => x.status === 'delivered').length;
const unassigned = [...seqOf.values()].filter((s) => s === null).length;

const p: FaultStats = done.proxy;
const checks: Array<[string, string, string, boolean]> = [
  ['events acknowledged to the sender', `${flags.events}`, `${delivered}`, delivered === flags.events],
  ['ledger entries (applied once each)', `${flags.events}`, `${applied}`, applied === flags.events],
  ['events applied more than once', '0', `${appliedTwice}`, appliedTwice === 0],
  ['events lost (never applied)', '0', `${missing}`, missing === 0],
  [
    'keys applied out of seq order',
    '0',
    `${outOfOrderKeys} of ${flags.keys}`,
    outOfOrderKeys === 0 && unassigned === 0,
  ],
  ['balances ≠ sum of amounts', '0', `${wrongBalances} of ${flags.keys}`, wrongBalances === 0],
  ['events still held in the inbox', '0', `${held}`, held === 0],
  ['dead letters (sender + inbox)', '0', `${deadLetters + dead}`, deadLetters + dead === 0],
];
const faults = p.injected;
const w = [36, 8, 12];
const row = (a: string, b: string, c: string, d: string) =>
  `│ ${a.padEnd(w[0])} │ ${b.padStart(w[1])} │ ${c.padStart(w[2])} │ ${d.padEnd(4)} │`;
const rule = (l: string, m: string, r2: string) =>
  `${l}${'─'.repeat(w[0] + 2)}${m}${'─'.repeat(w[1] + 2)}${m}${'─'.repeat(w[2] + 2)}${m}──────${r2}`;
console.log(
  `\nfaults injected: ${faults.drop} dropped (${p.drops.reset} reset, ${p.drops['502']} 502, ${p.drops.timeout} silent), ` +
    `${faults['drop-response']} responses lost after processing, ${faults.duplicate} duplicated, ` +
    `${faults.reorder} reordered, ${faults.delay} delayed, ${faults.error} answered 500`,
);
console.log(
  `the inbox answered: ${Object.entries(p.outcomes)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${v} ${k}`)
    .join(', ')}`,
);
console.log(
  `delivery took ${((sentAt - trafficStarted) / 1000).toFixed(1)} s (${Math.round(flags.events / ((sentAt - trafficStarted) / 1000))} events/s), after ${((trafficStarted - started) / 1000).toFixed(1)} s of start-up\n`,
);
console.log(rule('┌', '┬', '┐'));
console.log(row('check', 'expected', 'observed', ''));
console.log(rule('├', '┼', '┤'));
for (const [name, want, got, ok] of checks) console.log(row(name, want, got, ok ? 'PASS' : 'FAIL'));
console.log(rule('└', '┴', '┘'));
const failed = checks.filter((c) => !c[3]).length;
console.log(
  failed === 0
    ? `\nall ${checks.length} checks passed in ${seconds()} s (${cpuSeconds()} s of CPU): exactly once, in order, nothing lost.`
    : `\n${failed} check(s) FAILED.`,
);

await worker.terminate().catch(() => {});
if (schemas) {
  const db = await ledger.inbox.kysely();
  await sql`drop schema if exists ${sql.id(schemas.inbox)}, ${sql.id(schemas.ledger)} cascade`.execute(db);
}
await ledger.close();
await pglite?.close();
process.exit(failed === 0 ? 0 : 1);
