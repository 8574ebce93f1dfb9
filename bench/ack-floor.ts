/**
 * The floor under deferred mode's acknowledgement latency on this machine: bursts of IN_FLIGHT
 * deliveries answered by the least a server can do (Node's http, the body parsed, the inbox's
 * `claim` as one prepared statement over 2 connections), beside the ledger example in deferred
 * mode with its workers off, in the same run; each server in a process of its own.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/ack-floor.ts
 *
 * Environment: IN_FLIGHT (40), BURSTS (20), SEQUENTIAL (200: one at a time, before the bursts).
 * Where the floor's own p99 is above a latency goal, the goal is the machine's as much as the inbox's.
 */
import { randomBytes } from 'node:crypto';
import { Agent, createServer } from 'node:http';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createTables } from '../src/db/sql/tables.js';
import { createInbox } from '../src/index.js';
import { dropSchemas } from './cleanup.js';
import { percentile, postDelivery } from './post.js';
import { forkReady } from './server-process.js';

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
      const values = [String(req.headers['idempotency-key']), body];
      const { rows } = await pool.query({ name: 'claim', text, values });
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
  const acknowledgementsOnly = { mode: 'deferred', workers: 0, sweepIntervalMs: 0, logger: false } as const;
  // The floor's schema: the inbox's tables and functions, migrated by the inbox itself.
  const migrated = createInbox({ db: url, schema: schemas[0]!, handle: () => {}, ...acknowledgementsOnly });
  await migrated.ready();
  await migrated.close();
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  const servers = [
    {
      name: 'floor (http + pg, the claim)',
      script: fileURLToPath(import.meta.url),
      args: ['floor-server', schemas[0]!],
    },
    {
      name: 'inbox (ledger example, deferred, no workers, no sweeper)',
      args: [
        JSON.stringify({
          ledgerSchema: schemas[2],
          ingest: false,
          inbox: { db: url, schema: schemas[1], ...acknowledgementsOnly },
        }),
      ],
    },
  ];
  console.log(
    `bench/ack-floor.ts — bursts of ${IN_FLIGHT}, ${BURSTS} of them; load ${loadavg()[0].toFixed(2)}`,
  );
  try {
    for (const s of servers) {
      const server = await forkReady(s.args, { script: s.script });
      const post = (id: string) => postDelivery(agent, `${server.ready.url}/webhooks`, id, '{"amount":1}');
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
      const at = (xs: number[], p: number) => percentile(xs, p).toFixed(1);
      console.log(
        `  ${s.name}: one at a time p50 ${at(one, 50)} ms; bursts p50 ${at(burst, 50)} ms, p99 ${at(burst, 99)} ms ${JSON.stringify(Object.fromEntries(statuses))}`,
      );
      await server.close();
    }
  } finally {
    agent.destroy();
    await dropSchemas(url, schemas);
  }
  console.log(`  load after: ${loadavg()[0].toFixed(2)}`);
}
