/**
 * The floor under deferred mode's acknowledgement latency on this machine: bursts of IN_FLIGHT
 * (40) deliveries at once, answered by the least a server can do for one (Node's http, the body
 * parsed, the inbox's own `claim` as one prepared statement over 2 connections, the answer),
 * beside the ledger example in deferred mode answering the same bursts with its workers off
 * (acknowledgements only), in the same run. Each server in a process of its own, as
 * `npm run example` runs; the bursts from this one.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/ack-floor.ts
 *
 * Environment: IN_FLIGHT (40), BURSTS (20), SEQUENTIAL (200: one at a time, before the bursts).
 * What it tells: issue 41's goal (p99 ≤ 50 ms with 40 in flight) is a property of the machine
 * as much as of the inbox when the floor's own p99 is above it.
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Agent, createServer } from 'node:http';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createTables } from '../src/db/sql/tables.js';
import { createInbox } from '../src/index.js';
import { postDelivery } from './post.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const int = (name: string, fallback: number) => Number(process.env[name] ?? fallback);

if (process.argv[2] === 'floor-server') {
  // The floor: nothing between the socket and the claim but what any server must do.
  const claim = createTables(process.argv[3]!, '').fn('claim');
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const text = `select decision from ${claim}('default', $1, null, null, 'h', $2::bytea, null, false, false, true, 1000, 10000, '1s', null)`;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks);
      JSON.parse(body.toString());
      const { rows } = await pool.query({
        name: 'claim',
        text,
        values: [String(req.headers['idempotency-key']), body],
      });
      res.writeHead(202, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ status: rows[0].decision }));
    });
  });
  server.listen(0, '127.0.0.1', () => {
    const address = server.address() as { port: number };
    process.send?.({ type: 'ready', url: `http://127.0.0.1:${address.port}` });
  });
  process.on('message', () => process.exit(0));
} else {
  await main();
}

async function main(): Promise<void> {
  const IN_FLIGHT = int('IN_FLIGHT', 40);
  const BURSTS = int('BURSTS', 20);
  const SEQUENTIAL = int('SEQUENTIAL', 200);
  const run = randomBytes(3).toString('hex');
  const schemas = [`floor_${run}`, `inbox_${run}`, `inbox_${run}_ledger`];
  // The floor's schema: the inbox's tables and functions, migrated by the inbox itself.
  const migrated = createInbox({
    db: url,
    schema: schemas[0]!,
    mode: 'deferred',
    workers: 0,
    sweepIntervalMs: 0,
    handle: () => {},
    logger: false,
  });
  await migrated.ready();
  await migrated.close();
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  const servers = [
    {
      name: 'floor (http + pg, the claim)',
      script: fileURLToPath(import.meta.url),
      args: ['floor-server', schemas[0]!],
      path: '/webhooks',
    },
    {
      name: 'inbox (ledger example, deferred, no workers, no sweeper)',
      script: fileURLToPath(new URL('./ledger-process.ts', import.meta.url)),
      args: [
        JSON.stringify({
          ledgerSchema: schemas[2],
          ingest: false,
          inbox: {
            db: url,
            schema: schemas[1],
            mode: 'deferred',
            workers: 0,
            sweepIntervalMs: 0,
            logger: false,
          },
        }),
      ],
      path: '/webhooks',
    },
  ];
  console.log(
    `bench/ack-floor.ts — bursts of ${IN_FLIGHT}, ${BURSTS} of them; load ${loadavg()[0].toFixed(2)}`,
  );
  try {
    for (const s of servers) {
      const child = fork(s.script, s.args, { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
      const ready = await new Promise<{ url: string }>((resolve) =>
        child.on('message', (m: any) => m.type === 'ready' && resolve(m)),
      );
      const post = (id: string) => postDelivery(agent, `${ready.url}${s.path}`, id, '{"amount":1}');
      for (let i = 0; i < 50; i++) await post(`${run}-warm-${i}`);
      const one: number[] = [];
      for (let i = 0; i < SEQUENTIAL; i++) {
        const began = performance.now();
        await post(`${run}-one-${i}`);
        one.push(performance.now() - began);
      }
      const burst: number[] = [];
      const statuses = new Map<number, number>();
      for (let b = 0; b < BURSTS; b++) {
        await Promise.all(
          Array.from({ length: IN_FLIGHT }, async (_, i) => {
            const began = performance.now();
            const status = await post(`${run}-b${b}-${i}`);
            burst.push(performance.now() - began);
            statuses.set(status, (statuses.get(status) ?? 0) + 1);
          }),
        );
        await new Promise((r) => setTimeout(r, 200));
      }
      const at = (xs: number[], p: number) => {
        const sorted = [...xs].sort((a, b) => a - b);
        return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!.toFixed(1);
      };
      console.log(
        `  ${s.name}: one at a time p50 ${at(one, 50)} ms; bursts p50 ${at(burst, 50)} ms, p99 ${at(burst, 99)} ms ${JSON.stringify(Object.fromEntries(statuses))}`,
      );
      if (s.args[0] === 'floor-server') child.send('stop');
      else child.send({ id: 0, cmd: 'close' });
      await new Promise((r) => child.on('exit', r));
    }
  } finally {
    agent.destroy();
    const admin = new pg.Pool({ connectionString: url, max: 1 });
    for (const schema of schemas) await admin.query(`drop schema if exists "${schema}" cascade`);
    await admin.end();
  }
  console.log(`  load after: ${loadavg()[0].toFixed(2)}`);
}
