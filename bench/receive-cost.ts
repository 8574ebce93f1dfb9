/**
 * What one new event costs the Node process and PostgreSQL, without HTTP: `inbox.receive` of
 * unique deliveries against the same ledger write in a bare transaction, in `handmade` (the
 * id into a one-column table first) and in `guarded` (the inbox's guarantees for an unordered
 * event written plainly with Kysely, as a careful user would: see below), in one process,
 * rounds interleaved, CPU read from the kernel (this process: `process.cpuUsage`; PostgreSQL:
 * every backend's and helper's, from /proc, as bench/run.ts reads it, with the helpers' part
 * also printed apart). Throughput on a 2-core machine that the server, PostgreSQL and the load
 * share moves with everything else; CPU per delivery moves less.
 *
 *   npx tsc -p tsconfig.bench.json && node .tmp/bench-build/bench/receive-cost.js
 *   ROUNDS=12 N=2000 CONCURRENCY=10 node .tmp/bench-build/bench/receive-cost.js
 *
 * Run compiled (tsconfig.bench.json), as the package ships: see bench/run.ts on tsx.
 */
import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { Ledger } from '../examples/ledger/ledger.js';
import { openDatabase } from '../src/db/database.js';
import { createInbox, type HandlerContext, type InboxEvent } from '../src/index.js';
import { postgresCpuMs, postgresCpuSplitSince } from './process-cpu.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
/** A positive integer from the environment, or its default; anything else stops the run, naming it. */
function positiveInteger(name: string, fallback: number): number {
  const text = process.env[name];
  if (text === undefined) return fallback;
  if (!/^[1-9]\d*$/.test(text))
    throw new Error(`${name} must be a positive integer, got ${JSON.stringify(text)}`);
  return Number(text);
}
/** CONTENDERS=inbox,handmade: some of them (bare, when given, for the ratios); checked before anything is created. */
const ALL = ['bare', 'handmade', 'guarded', 'inbox'] as const;
const names = process.env.CONTENDERS?.split(',') ?? [...ALL];
for (const name of names)
  if (!(ALL as readonly string[]).includes(name))
    throw new Error(`CONTENDERS: unknown contender ${JSON.stringify(name)}; one of ${ALL.join(', ')}`);
const ROUNDS = positiveInteger('ROUNDS', 8);
const N = positiveInteger('N', 1500);
const CONCURRENCY = positiveInteger('CONCURRENCY', 10);
const run = `rcost_${process.pid}`;

/** INBOX, a JSON object of inbox options; createInbox validates each of them. */
function inboxOptions(): Record<string, unknown> {
  const text = process.env.INBOX ?? '{}';
  let options: unknown;
  try {
    options = JSON.parse(text);
  } catch {
    throw new Error(`INBOX must be a JSON object of inbox options, got ${JSON.stringify(text)}`);
  }
  if (options === null || typeof options !== 'object' || Array.isArray(options))
    throw new Error(`INBOX must be a JSON object of inbox options, got ${JSON.stringify(text)}`);
  return options as Record<string, unknown>;
}

const ledger = new Ledger(`${run}_ledger`);
const handle = (event: InboxEvent<{ amount: number; account: string }>, context: HandlerContext) =>
  ledger.handle({ ...event, key: event.key ?? event.body.account }, context);
// INBOX='{"sweepIntervalMs":0}': options of the inbox's, to take parts away.
const inbox = createInbox({
  db: url,
  poolSize: CONCURRENCY,
  schema: `${run}_inbox`,
  handle,
  ...inboxOptions(),
});
const kysely = await inbox.kysely();
await ledger.setup(kysely);
const db = await openDatabase(url, { poolSize: CONCURRENCY });
const processed = `${run}_ledger.processed`;
await kysely.schema
  .createTable(processed)
  .addColumn('id', 'text', (c) => c.primaryKey())
  .execute();
const guardedEvents = `${run}_ledger.guarded`;
await kysely.schema
  .createTable(guardedEvents)
  .addColumn('id', 'text', (c) => c.primaryKey())
  .addColumn('body_hash', 'text', (c) => c.notNull())
  .addColumn('status', 'text', (c) => c.notNull().defaultTo('pending'))
  .addColumn('result', 'jsonb')
  .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
  .addColumn('last_error', 'text')
  .addColumn('received_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
  .addColumn('processed_at', 'timestamptz')
  .execute();
/** `guarded`'s duplicates answered in memory: id → [body hash, result JSON], oldest first. */
const guardedSeen = new Map<string, [string, string]>();

/** Spread over 1000 accounts, as the bench's unique workload (bench/workloads.ts): one account would make every transaction wait for the one before. */
const bodyOf = (id: string) => Buffer.from(`{"account":"a${hashOf(id) % 1000}","amount":1}`);
function hashOf(id: string): number {
  let h = 0;
  for (let i = 0; i < id.length; i++) h = (h * 31 + id.charCodeAt(i)) >>> 0;
  return h;
}
const contextOf = (tx: HandlerContext['tx']): HandlerContext => ({
  tx,
  signal: new AbortController().signal,
  idempotencyKey: () => 'unused',
});
const eventOf = (id: string, rawBody = bodyOf(id)): InboxEvent<{ amount: number; account: string }> => ({
  id,
  source: 'default',
  key: null,
  type: null,
  seq: null,
  body: JSON.parse(rawBody.toString()),
  rawBody,
  headers: {},
  attempt: 1,
  receivedAt: new Date(),
});

const contenders: Record<(typeof ALL)[number], (id: string) => Promise<unknown>> = {
  bare: (id) => db.kysely.transaction().execute((tx) => handle(eventOf(id), contextOf(tx))),
  handmade: (id) =>
    db.kysely.transaction().execute(async (tx) => {
      const claimed = await tx
        .insertInto(processed)
        .values({ id })
        .onConflict((oc) => oc.doNothing())
        .returning('id')
        .executeTakeFirst();
      if (!claimed) return undefined;
      return handle(eventOf(id), contextOf(tx));
    }),
  /**
   * The inbox's guarantees for an unordered event, by hand, without folding (node-postgres sends
   * one statement per round trip): a body hash (an id reused with another body is refused), a
   * duplicate this process answered found in memory, the row first (its primary key is the
   * lock: a concurrent copy waits for this COMMIT, then finds the row), a stored result for
   * duplicates, a SAVEPOINT so that a failed run is counted in the same transaction, a timeout
   * signal, the result stored before COMMIT. BEGIN, INSERT, SAVEPOINT, the handler's 2, UPDATE,
   * COMMIT = 7 round trips, where the inbox sends 4.
   */
  guarded: async (id) => {
    const rawBody = bodyOf(id);
    const hash = createHash('sha256').update(rawBody).digest('hex');
    const seen = guardedSeen.get(id);
    if (seen) {
      if (seen[0] !== hash) throw new Error('id reused with another body');
      return JSON.parse(seen[1]);
    }
    const event = eventOf(id, rawBody);
    const json = await db.kysely
      .transaction()
      .setIsolationLevel('read committed')
      .execute(async (tx) => {
        const claimed = await tx
          .insertInto(guardedEvents)
          .values({ id, body_hash: hash })
          .onConflict((oc) => oc.doNothing())
          .returning('id')
          .executeTakeFirst();
        if (!claimed) {
          // The id's row exists (the INSERT waited for its writer's COMMIT): locked, then read.
          const row = await tx
            .selectFrom(guardedEvents)
            .select(['body_hash', 'status', 'result'])
            .where('id', '=', id)
            .forUpdate()
            .executeTakeFirstOrThrow();
          if (row.body_hash !== hash) throw new Error('id reused with another body');
          if (row.status === 'processed') return JSON.stringify(row.result);
          // Still pending: an earlier run failed, and this delivery is its retry.
        }
        await sql`savepoint handler`.execute(tx);
        const controller = new AbortController();
        const timer = setTimeout(() => controller.abort(), 30_000);
        let result: unknown;
        try {
          result = await handle(event, { tx, signal: controller.signal, idempotencyKey: () => id });
        } catch (err) {
          await sql`rollback to savepoint handler`.execute(tx);
          await tx
            .updateTable(guardedEvents)
            .set({ attempts: sql`attempts + 1`, last_error: String(err) })
            .where('id', '=', id)
            .execute();
          return undefined;
        } finally {
          clearTimeout(timer);
        }
        const text = result === undefined ? null : JSON.stringify(result);
        await tx
          .updateTable(guardedEvents)
          .set({ status: 'processed', result: text, attempts: sql`attempts + 1`, processed_at: sql`now()` })
          .where('id', '=', id)
          .execute();
        return text ?? 'null';
      });
    if (json !== undefined) {
      guardedSeen.set(id, [hash, json]);
      if (guardedSeen.size > 10_000) guardedSeen.delete(guardedSeen.keys().next().value as string);
    }
  },
  inbox: async (id) => {
    const outcome = await inbox.receive({
      headers: { 'idempotency-key': id, 'content-type': 'application/json' },
      rawBody: bodyOf(id),
    });
    if (outcome.status !== 200) throw new Error(`inbox answered ${outcome.status}`);
  },
};

async function send(name: string, prefix: string, count: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < count) await contenders[name as (typeof ALL)[number]](`${prefix}-${next++}`);
    }),
  );
}

const node = new Map<string, number[]>();
const postgres = new Map<string, number[]>();
/** Of PostgreSQL's CPU, what its helpers used (WAL writer, checkpointer, …): the rest is the backends'. */
const helpers = new Map<string, number[]>();
try {
  for (const name of names) await send(name, `warm-${name}`, 500);
  await sql`analyze ${sql.table(`${run}_inbox.events`)}`.execute(kysely);
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of names) {
      const pgBefore = postgresCpuMs();
      const before = process.cpuUsage();
      await send(name, `r${round}-${name}`, N);
      const used = process.cpuUsage(before);
      node.set(name, [...(node.get(name) ?? []), (used.user + used.system) / N]);
      const pg = postgresCpuSplitSince(pgBefore);
      postgres.set(name, [...(postgres.get(name) ?? []), ((pg.backends + pg.helpers) * 1000) / N]);
      helpers.set(name, [...(helpers.get(name) ?? []), (pg.helpers * 1000) / N]);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
  console.log(
    `CPU per new event, µs (medians of ${ROUNDS} rounds × ${N}, ${CONCURRENCY} at once): Node / PostgreSQL / both; of PostgreSQL's, its helpers' (WAL writer, checkpointer, …)`,
  );
  const bareBoth = node.has('bare') ? median(node.get('bare')!) + median(postgres.get('bare')!) : Number.NaN;
  for (const name of names) {
    const n = median(node.get(name)!);
    const p = median(postgres.get(name)!);
    console.log(
      `${name.padEnd(9)} ${n.toFixed(0).padStart(5)} / ${p.toFixed(0).padStart(5)} / ${(n + p).toFixed(0).padStart(5)}  ${((n + p) / bareBoth).toFixed(2)}× bare  helpers ${median(helpers.get(name)!).toFixed(0)}`,
    );
  }
} finally {
  await sql`drop schema if exists ${sql.id(`${run}_inbox`)} cascade`.execute(kysely);
  await sql`drop schema if exists ${sql.id(`${run}_ledger`)} cascade`.execute(kysely);
  await db.destroy();
  await inbox.close();
}
