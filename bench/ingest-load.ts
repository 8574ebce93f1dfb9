/**
 * The ingest contract's load test as a benchmark: 50 senders, each posting a random
 * `sequence_id` in 1..10^6 (`idempotency_key` `test-<seq>`) to the ledger example's
 * `POST /webhooks/ingest` every 100 ms, on real Postgres, over HTTP (Express, port 0). Prints
 * the answers by kind, the p50/p95 latency and `GET /ledger/verify` at the end. The contract
 * asks for 2 minutes and a p95 under 200 ms; run it on a quiet machine (BENCHMARKS.md). The
 * ledger runs in a process of its own (bench/ledger-process.ts), as `npm run example` does: in
 * the senders' process, the p50 was the senders' own share of one event loop (50 ÷ its
 * throughput).
 *
 *   npx tsx bench/ingest-load.ts [seconds=120] [senders=50]
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test (the default)
 *   GAP_TIMEOUT_MS (the inbox's default, 30000), SWEEP_INTERVAL_MS (1000)
 *
 * The same load as test/ledger-ingest-contract.test.ts (examples/ledger/ingest-load.ts), in
 * schemas of its own, dropped at the end.
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { runIngestLoad } from '../examples/ledger/ingest-load.js';

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
const child = fork(
  join(dirname(fileURLToPath(import.meta.url)), 'ledger-process.ts'),
  [
    JSON.stringify({
      ledgerSchema: schemas.ledger,
      inbox: {
        db: url,
        schema: schemas.inbox,
        gapTimeoutMs: intEnv('GAP_TIMEOUT_MS'),
        sweepIntervalMs: intEnv('SWEEP_INTERVAL_MS'),
        logger: false,
      },
    }),
  ],
  { execArgv: ['--import', 'tsx'], stdio: 'inherit' },
);
const ledger = await new Promise<{ url: string }>((resolve, reject) => {
  child.once('exit', (code) => reject(new Error(`the ledger process exited (${code})`)));
  child.on('message', (m: { type: string; url: string }) => {
    if (m.type === 'ready') resolve({ url: m.url });
  });
});
try {
  console.log(
    `ingest load: ${senders} senders for ${seconds} s against ${ledger.url} (load average before: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')})`,
  );
  const load = await runIngestLoad({ url: ledger.url, seconds, senders });
  const kinds = new Map<string, number>();
  for (const a of load.answers) {
    const kind = `${a.status} ${a.body.status ?? ''}${a.body.reason ? ` (${a.body.reason})` : ''}`;
    kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
  }
  const verify = await (await fetch(`${ledger.url}/ledger/verify`)).json();
  console.log(
    JSON.stringify(
      {
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
      },
      null,
      2,
    ),
  );
} finally {
  child.removeAllListeners('exit');
  await new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.send({ id: 0, cmd: 'close' });
  });
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`drop schema if exists "${schemas.inbox}", "${schemas.ledger}" cascade`);
  await client.end();
}
