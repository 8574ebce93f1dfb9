/**
 * The ingest contract's load test (examples/ledger/ingest-load.ts, as
 * test/ledger-ingest-contract.test.ts sends it) as a benchmark: 50 senders, each posting a
 * random `sequence_id` to the ledger example's `POST /webhooks/ingest` every 100 ms, over HTTP,
 * the ledger in a process of its own. Prints the answers by kind, p50/p95 and
 * `GET /ledger/verify`. The contract asks for 2 minutes and a p95 under 200 ms.
 *
 *   npx tsx bench/ingest-load.ts [seconds=120] [senders=50]
 *   DATABASE_URL (postgres://postgres@127.0.0.1:5432/test), GAP_TIMEOUT_MS, SWEEP_INTERVAL_MS
 */
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { runIngestLoad } from '../examples/ledger/ingest-load.js';
import { dropSchemas } from './cleanup.js';
import { forkReady } from './server-process.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const seconds = Number(process.argv[2] ?? 120);
const senders = Number(process.argv[3] ?? 50);
const intEnv = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
if (!(seconds > 0) || !Number.isInteger(senders) || senders < 1) {
  console.error('usage: npx tsx bench/ingest-load.ts [seconds=120] [senders=50]');
  process.exit(2);
}

const suffix = randomBytes(4).toString('hex');
const schemas = { inbox: `bench_ingest_${suffix}`, ledger: `bench_ingest_app_${suffix}` };
const inbox = {
  db: url,
  schema: schemas.inbox,
  gapTimeoutMs: intEnv('GAP_TIMEOUT_MS'),
  sweepIntervalMs: intEnv('SWEEP_INTERVAL_MS'),
  logger: false,
};
const child = await forkReady([JSON.stringify({ ledgerSchema: schemas.ledger, inbox })]);
const ledger = child.ready;
try {
  const before = os.loadavg().map((l) => l.toFixed(2));
  console.log(
    `ingest load: ${senders} senders for ${seconds} s against ${ledger.url} (load average before: ${before.join(' ')})`,
  );
  const load = await runIngestLoad({ url: ledger.url, seconds, senders });
  const kinds = new Map<string, number>();
  for (const a of load.answers) {
    const kind = `${a.status} ${a.body.status ?? ''}${a.body.reason ? ` (${a.body.reason})` : ''}`;
    kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
  }
  const verify = await (await fetch(`${ledger.url}/ledger/verify`)).json();
  const result = {
    seconds,
    senders,
    posts: load.answers.length,
    perSecond: Math.round(load.answers.length / seconds),
    answers: Object.fromEntries(kinds),
    late: load.late,
    other: load.other,
    collisions: load.collisions,
    p50Ms: Number(load.p50.toFixed(1)),
    p95Ms: Number(load.p95.toFixed(1)),
    verify,
    loadAverageAfter: os.loadavg().map((l) => Number(l.toFixed(2))),
  };
  console.log(JSON.stringify(result, null, 2));
} finally {
  await child.close();
  await dropSchemas(url, [schemas.inbox, schemas.ledger]);
}
