/**
 * The contenders of the benchmark: the same Express app shape, the same PostgreSQL, the same
 * handler (the ledger's write) behind different ways of deduplicating, each in its own child
 * process (bench/server.ts). Unordered events carry their account in the body, so that the
 * writes spread over 1000 accounts; ordered events use the ordering key, as the ledger does.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { type Kysely, sql } from 'kysely';
import { inbox as expressInbox } from '../adapters/express.js';
import { Ledger } from '../examples/ledger/ledger.js';
import { idempotencyKey } from '../src/apply/handler-context.js';
import { type Database, openDatabase } from '../src/db/database.js';
import {
  createInbox,
  type HandlerContext,
  type Inbox,
  type InboxEvent,
  type InboxOptions,
} from '../src/index.js';

export interface ContenderConfig {
  contender: string;
  postgresUrl: string;
  redisUrl: string;
  schemaBase: string;
  poolSize: number;
}

export interface Stats {
  /** Ledger entries written for the measured ids, the distinct events among them, the extra entries. */
  applied: number;
  distinct: number;
  doubleApplied: number;
  /** Entries of an ordered key whose seq is not the previous entry's seq + 1. */
  outOfOrder: number;
  /** Inbox only: events still held, dead-lettered, and the drain latencies (ms) of the held ones. */
  held: number;
  dead: number;
  drainMs: number[];
}

export interface RunningContender {
  readonly port: number;
  stats(prefix: string): Promise<Stats>;
  analyze(): Promise<void>;
  close(): Promise<void>;
}

interface ContenderSpec {
  /** One line for BENCHMARKS.md. */
  description: string;
  start(config: ContenderConfig): Promise<RunningContender>;
}

/** The ledger's write, the account taken from the body for unordered events. */
function ledgerHandler(ledger: Ledger) {
  return (event: InboxEvent<{ amount: number; account?: string }>, context: HandlerContext) =>
    ledger.handle({ ...event, key: event.key ?? event.body?.account ?? 'none' }, context);
}

/** What an event looks like to the non-inbox contenders, read from the request. */
function eventOf(req: express.Request): InboxEvent<any> {
  const key = req.get('x-key') ?? null;
  const seq = req.get('x-seq');
  return {
    id: req.get('idempotency-key') ?? '',
    source: 'bench',
    key,
    type: null,
    seq: seq === undefined ? null : Number(seq),
    body: req.body,
    rawBody: Buffer.alloc(0),
    headers: {},
    attempt: 1,
    receivedAt: new Date(),
  };
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

async function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

const NONE = { applied: 0, distinct: 0, doubleApplied: 0, outOfOrder: 0, held: 0, dead: 0, drainMs: [] };

/** Reads the ledger back for the ids of one measurement (they all start with `prefix`). */
async function ledgerStats(db: Kysely<any>, schema: string, prefix: string): Promise<Stats> {
  const like = `${prefix}%`;
  const counts = await sql<{ applied: string; distinct: string }>`
    select count(*) as applied, count(distinct event_id) as distinct
      from ${sql.table(`${schema}.entries`)} where event_id like ${like}`.execute(db);
  const order = await sql<{ bad: string }>`
    select count(*) as bad from (
      select seq, lag(seq) over (partition by key order by n) as prev
        from ${sql.table(`${schema}.entries`)} where event_id like ${like} and seq is not null) x
     where (prev is null and seq <> 1) or (prev is not null and seq <> prev + 1)`.execute(db);
  const applied = Number(counts.rows[0].applied);
  const distinct = Number(counts.rows[0].distinct);
  return {
    ...NONE,
    applied,
    distinct,
    doubleApplied: applied - distinct,
    outOfOrder: Number(order.rows[0].bad),
  };
}

async function analyzeSchema(db: Kysely<any>, schema: string): Promise<void> {
  await sql`analyze ${sql.table(`${schema}.accounts`)}`.execute(db);
  await sql`analyze ${sql.table(`${schema}.entries`)}`.execute(db);
}

/** A contender that is not the inbox: an Express app over its own pool, the ledger in `schema`. */
async function plainContender(
  config: ContenderConfig,
  name: string,
  /** Its routes on `app`; resolves to what closing it takes beyond the server and the pool. */
  mount: (
    app: express.Express,
    db: Database,
    ledger: Ledger,
    schema: string,
  ) => Promise<(() => Promise<void>) | void>,
  embedded = false,
): Promise<RunningContender> {
  const schema = `${config.schemaBase}_${name}`;
  const db = await openDatabase(embedded ? 'memory' : config.postgresUrl, { poolSize: config.poolSize });
  const ledger = new Ledger(schema);
  await ledger.setup(db.kysely);
  const app = express();
  const cleanup = await mount(app, db, ledger, schema);
  const server = createServer(app);
  const port = await listen(server);
  return {
    port,
    stats: (prefix) => ledgerStats(db.kysely, schema, prefix),
    analyze: () => analyzeSchema(db.kysely, schema),
    async close() {
      await closeServer(server);
      await cleanup?.();
      await db.destroy();
    },
  };
}

/** The handler context the inbox would give (no timeout here). */
function contextFor(tx: HandlerContext['tx'], event: InboxEvent<any>): HandlerContext {
  return {
    tx,
    signal: new AbortController().signal,
    idempotencyKey: (name = 'default') => idempotencyKey(event.source, event.id, name),
  };
}

/** Applies the ledger write in one plain transaction (what `bare` does, and what peers wrap). */
function applyInTransaction(db: Database, ledger: Ledger, event: InboxEvent<any>) {
  const handle = ledgerHandler(ledger);
  return db.kysely.transaction().execute((tx) => handle(event, contextFor(tx, event)));
}

/** Answers what `apply` resolves to, or 500 if it throws. */
async function answer(res: express.Response, apply: () => Promise<unknown>): Promise<void> {
  try {
    res.json(await apply());
  } catch {
    res.status(500).json({ error: 'failed' });
  }
}

/** The ledger write in a plain transaction, nothing else (`bare`, `bare-pglite`). */
function bareContender(config: ContenderConfig, name: string, embedded = false): Promise<RunningContender> {
  const mount = async (app: express.Express, db: Database, ledger: Ledger) => {
    app.post('/webhooks', express.json(), (req, res) =>
      answer(res, () => applyInTransaction(db, ledger, eventOf(req))),
    );
  };
  return plainContender(config, name, mount, embedded);
}

/** The inbox on the ledger, with the schemas of this benchmark. */
async function inboxContender(
  config: ContenderConfig,
  name: string,
  options: {
    embedded?: boolean;
    inbox?: Partial<InboxOptions>;
    /** Its HTTP server (by default the Express adapter's). */
    serve?: (inbox: Inbox, ledger: Ledger) => Promise<Server>;
    /** On a Citus coordinator: the inbox's tables and the ledger's distributed, colocated. */
    citus?: boolean;
  },
): Promise<RunningContender> {
  const schema = `${config.schemaBase}_${name}`;
  const ledger = new Ledger(`${schema}_ledger`);
  const inbox = createInbox({
    db: options.embedded ? undefined : config.postgresUrl,
    poolSize: config.poolSize,
    schema: `${schema}_inbox`,
    handle: ledgerHandler(ledger),
    ...options.inbox,
    ...(options.citus ? { citus: {} } : {}),
  });
  const kysely = await inbox.kysely();
  await ledger.setup(kysely);
  if (options.citus) await ledger.distribute(kysely, `${schema}_inbox.events`);
  const serve =
    options.serve ?? (async (core: Inbox) => createServer(express().use('/webhooks', expressInbox(core))));
  const server = await serve(inbox, ledger);
  const port = await listen(server);
  const events = sql.table(`${schema}_inbox.events`);
  return {
    port,
    async stats(prefix) {
      await inbox.idle();
      const stats = await ledgerStats(kysely, `${schema}_ledger`, prefix);
      const like = `${prefix}%`;
      const status = await sql<{ status: string; n: string }>`
        select status, count(*) as n from ${events} where id like ${like} group by status`.execute(kysely);
      for (const row of status.rows) {
        if (row.status === 'held') stats.held = Number(row.n);
        if (row.status === 'dead') stats.dead = Number(row.n);
      }
      // Drain latency: from the gap-filling event's transaction start to the held event's, for
      // every event that arrived before its predecessor was applied.
      const drains = await sql<{ ms: number }>`
        select extract(epoch from (e.processed_at - p.processed_at)) * 1000 as ms
          from ${events} e join ${events} p
            on p.source = e.source and p.stream = e.stream and p.key = e.key and p.seq = e.seq - 1
         where e.id like ${like} and e.status = 'processed' and p.status = 'processed'
           and e.received_at < p.processed_at`.execute(kysely);
      stats.drainMs = drains.rows.map((r) => Number(r.ms));
      return stats;
    },
    async analyze() {
      await analyzeSchema(kysely, `${schema}_ledger`);
      await sql`analyze ${events}`.execute(kysely);
      await sql`analyze ${sql.table(`${schema}_inbox.keys`)}`.execute(kysely);
    },
    async close() {
      await closeServer(server);
      await inbox.close();
    },
  };
}

/** The Citus cluster's databases (`--citus`, docs/capacity.md): its shards on two workers, on one. */
export const CITUS_URLS = {
  'inbox-citus': process.env.CITUS_URL ?? 'postgres://postgres@127.0.0.1:5440/inbox',
  'inbox-citus-1w': process.env.CITUS_1W_URL ?? 'postgres://postgres@127.0.0.1:5440/inbox_1w',
};

function citusContender(name: keyof typeof CITUS_URLS, workers: string): ContenderSpec {
  const postgresUrl = CITUS_URLS[name];
  return {
    description: `webhook-inbox on the Citus cluster, ${workers} holding the shards (${postgresUrl}): its tables and the ledger's distributed by key, colocated`,
    start: (config) => inboxContender({ ...config, postgresUrl }, 'citus', { citus: true }),
  };
}

export const CONTENDERS: Record<string, ContenderSpec> = {
  hello: {
    description: 'a hello-world POST handler: reads the JSON body, answers 200; no database',
    async start() {
      const app = express();
      app.post('/webhooks', express.json(), (_req, res) => void res.json({ ok: true }));
      const server = createServer(app);
      const port = await listen(server);
      return { port, stats: async () => NONE, analyze: async () => {}, close: () => closeServer(server) };
    },
  },
  bare: {
    description: 'the ledger write in a plain transaction, no deduplication (the ceiling)',
    start: (config) => bareContender(config, 'bare'),
  },
  handmade: {
    description:
      'the smallest correct inbox by hand: in one transaction, INSERT the id into a `processed` table (ON CONFLICT DO NOTHING; nothing inserted = a duplicate, rolled back, 200), the ledger write, COMMIT; no stored result, no ordering, no body check',
    start: (config) =>
      plainContender(config, 'handmade', async (app, db, ledger, schema) => {
        await sql`create table if not exists ${sql.table(`${schema}.processed`)} (id text primary key)`.execute(
          db.kysely,
        );
        const processed = `${schema}.processed`;
        const handle = ledgerHandler(ledger);
        const duplicate = Symbol('duplicate');
        app.post('/webhooks', express.json(), (req, res) =>
          answer(res, async () => {
            const event = eventOf(req);
            // The dedup row first: a concurrent delivery of the id waits on its unique index.
            const result = await db.kysely.transaction().execute(async (tx) => {
              const claimed = await tx
                .insertInto(processed)
                .values({ id: event.id })
                .onConflict((oc) => oc.doNothing())
                .returning('id')
                .executeTakeFirst();
              if (!claimed) return duplicate;
              return handle(event, contextFor(tx, event));
            });
            return result === duplicate ? { status: 'duplicate' } : result;
          }),
        );
      }),
  },
  'bare-pglite': {
    description: 'the ledger write in a plain transaction on embedded PGlite (the ceiling for inbox-pglite)',
    start: (config) => bareContender(config, 'barepgl', true),
  },
  naive: {
    description:
      'SELECT the id in a `processed` table; if absent, the ledger write and `INSERT … ON CONFLICT DO NOTHING` of the id in one transaction',
    start: (config) =>
      plainContender(config, 'naive', async (app, db, ledger, schema) => {
        await sql`create table if not exists ${sql.table(`${schema}.processed`)} (id text primary key, result jsonb)`.execute(
          db.kysely,
        );
        const processed = `${schema}.processed`;
        const handle = ledgerHandler(ledger);
        app.post('/webhooks', express.json(), (req, res) =>
          answer(res, async () => {
            const event = eventOf(req);
            // The check and the insert are two statements: two concurrent deliveries of one id
            // both see "not processed" and both apply. This is the race.
            const seen = await db.kysely
              .selectFrom(processed)
              .select('result')
              .where('id', '=', event.id)
              .executeTakeFirst();
            if (seen) return seen.result;
            return db.kysely.transaction().execute(async (tx) => {
              const r = await handle(event, contextFor(tx, event));
              await tx
                .insertInto(processed)
                .values({ id: event.id, result: JSON.stringify(r) })
                .onConflict((oc) => oc.doNothing())
                .execute();
              return r;
            });
          }),
        );
      }),
  },
  'node-idempotency': {
    description:
      '@node-idempotency/core 1.0 with its Redis storage (SET NX lock, then the cached response), in the Express wrapper its README describes',
    start: (config) =>
      plainContender(config, 'nodeidem', async (app, db, ledger) => {
        const { Idempotency } = await import('@node-idempotency/core');
        const { RedisStorageAdapter } = await import('@node-idempotency/storage-adapter-redis');
        const storage = new RedisStorageAdapter({ url: config.redisUrl });
        await storage.connect();
        const idempotency = new Idempotency(storage, {
          cacheKeyPrefix: `${config.schemaBase}:nodeidem`,
          cacheTTLMS: 10 * 60_000,
        });
        app.post('/webhooks', express.json(), async (req, res) => {
          const request = {
            headers: req.headers,
            path: req.path,
            body: req.body as Record<string, unknown>,
            method: req.method,
          };
          try {
            const cached = await idempotency.onRequest(request);
            if (cached) {
              res.status(Number(cached.additional?.status ?? 200)).json(cached.body);
              return;
            }
          } catch (err: any) {
            // In progress (a concurrent duplicate) is 409, as the library documents.
            res.status(err?.code === 'REQUEST_IN_PROGRESS' ? 409 : 422).json({ error: err?.code });
            return;
          }
          try {
            const result = await applyInTransaction(db, ledger, eventOf(req));
            await idempotency.onResponse(request, { body: result, additional: { status: 200 } });
            res.json(result);
          } catch (err) {
            await idempotency
              .onResponse(request, { error: err, additional: { status: 500 } })
              .catch(() => {});
            res.status(500).json({ error: 'failed' });
          }
        });
        return () => storage.disconnect();
      }),
  },
  'express-idempotency': {
    description:
      'express-idempotency 1.0 with express-idempotency-redis-adapter (find by key, then create: two round trips)',
    start: (config) =>
      plainContender(config, 'expidem', async (app, db, ledger) => {
        const { idempotency, getSharedIdempotencyService } = await import('express-idempotency');
        const module: any = await import('express-idempotency-redis-adapter');
        const RedisAdapter = module.default?.default ?? module.default;
        // The library reports its own failures with console.log: keep the bench output readable.
        console.log = () => {};
        const adapter = new RedisAdapter({ connectionConfig: { url: config.redisUrl }, ttl: 600 });
        await adapter.connect();
        app.post('/webhooks', express.json(), idempotency({ dataAdapter: adapter }), async (req, res) => {
          const service = getSharedIdempotencyService();
          if (service.isHit(req)) return;
          try {
            res.json(await applyInTransaction(db, ledger, eventOf(req)));
          } catch {
            await service.reportError(req);
            res.status(500).json({ error: 'failed' });
          }
        });
        app.use(
          (_err: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
            if (!res.headersSent)
              res.status(res.statusCode >= 400 ? res.statusCode : 500).json({ error: 'idempotency' });
          },
        );
        return () => adapter.disconnect?.() ?? Promise.resolve();
      }),
  },
  inbox: {
    description:
      'webhook-inbox as shipped (defaults: no Redis; duplicates this instance processed answered from its in-process cache), Express adapter, real PostgreSQL',
    start: (config) => inboxContender(config, 'inbox', {}),
  },
  'inbox-deferred': {
    description:
      'webhook-inbox in deferred mode, the acknowledging side alone (workers and sweeper off): claims that wait for a connection go to PostgreSQL as one statement and one commit',
    start: (config) =>
      inboxContender(config, 'inboxdef', { inbox: { mode: 'deferred', workers: 0, sweepIntervalMs: 0 } }),
  },
  'inbox-redis': {
    description:
      'webhook-inbox with the Redis fast path, the in-process cache off (`duplicateCacheSize: 0`): while most deliveries are duplicates, each is one Redis GET, as when it lands on another instance; while they are rare, Redis is not asked',
    start: (config) =>
      inboxContender(config, 'inboxrds', {
        inbox: { redis: config.redisUrl, redisPrefix: `${config.schemaBase}:`, duplicateCacheSize: 0 },
      }),
  },
  'inbox-pg': {
    description:
      'webhook-inbox without Redis and with the in-process cache off (`duplicateCacheSize: 0`): every duplicate goes to PostgreSQL',
    start: (config) => inboxContender(config, 'inboxpg', { inbox: { duplicateCacheSize: 0 } }),
  },
  'inbox-koa': {
    description: 'webhook-inbox, Koa adapter (the ledger example on Koa), real PostgreSQL',
    start: (config) =>
      inboxContender(config, 'inboxkoa', {
        serve: async (core, ledger) =>
          (await import('../examples/ledger/app-koa.js')).koaServer(core, ledger),
      }),
  },
  'inbox-fastify': {
    description: 'webhook-inbox, Fastify plugin (the ledger example on Fastify), real PostgreSQL',
    start: (config) =>
      inboxContender(config, 'inboxfst', {
        serve: async (core, ledger) =>
          (await import('../examples/ledger/app-fastify.js')).fastifyServer(core, ledger),
      }),
  },
  'inbox-pglite': {
    description: 'webhook-inbox, Express adapter, embedded PGlite (in memory, one session)',
    start: (config) => inboxContender(config, 'inboxpgl', { embedded: true }),
  },
  'inbox-citus': citusContender('inbox-citus', 'two workers'),
  'inbox-citus-1w': citusContender('inbox-citus-1w', 'one worker'),
};
