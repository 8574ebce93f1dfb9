/**
 * Option `groups` on real PostgreSQL, over real sockets, with two instances (two pools) where the
 * limit is "across instances": fair takes, per-group concurrency and rate, a group held by
 * RetryLater, inline mode's in-flight cap, a SIGKILLed worker's slot, and a group that cannot be read.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { sql } from 'kysely';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { shopInbox } from '../examples/groups/shopify.js';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import {
  createInbox,
  type Inbox,
  type InboxEvent,
  type InboxOptions,
  InboxOptionsError,
  RetryLater,
} from '../src/index.js';
import { responseText } from '../src/outcome.js';
import { signedDelivery } from '../src/testing/index.js';
import { childScript } from './support/child-scripts.js';
import { cli } from './support/cli.js';
import { pgliteTarget, postgresTarget, postgresUrl, type TargetDb } from './support/databases.js';
import { post } from './support/http.js';
import { perTestSchemas } from './support/per-test-schemas.js';

type Options = Omit<InboxOptions, 'handle' | 'db' | 'schema'>;
type Handle = InboxOptions['handle'];

interface Instance {
  readonly url: string;
  readonly inbox: Inbox;
}

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});

async function instance(
  db: TargetDb['db'],
  schema: string,
  options: Options,
  handle: Handle,
): Promise<Instance> {
  const inbox = createInbox({
    db,
    schema,
    logger: false,
    pollIntervalMs: 50,
    sweepIntervalMs: 0,
    ...options,
    handle,
  } as InboxOptions);
  const server: Server = createServer(async (req, res) => {
    const outcome = await inbox.receiveStream(req.headers, req);
    res.writeHead(outcome.status, outcome.headers).end(responseText(outcome));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  await inbox.ready();
  open.push({
    close: async () => {
      await inbox.close();
      await new Promise((resolve) => server.close(resolve));
    },
  });
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}/`, inbox };
}

const send = (url: string, group: string, id: string, body: object = {}) =>
  post(url, body, { 'idempotency-key': id, 'x-tenant': group });

/** Sends with at most `width` requests in flight; every answer must be 202. */
async function sendAll(url: string, group: string, ids: string[], width = 32): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < ids.length) {
        const id = ids[next++];
        const r = await send(url, group, id);
        if (r.status !== 202) throw new Error(`${id}: ${r.status} ${r.text}`);
      }
    }),
  );
}

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i + 1}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const groupOf = (e: InboxEvent) => e.headers['x-tenant'];

async function waiting(inbox: Inbox, schema: string, group: string): Promise<number> {
  const { rows } = await sql<{ n: number }>`select count(*)::int as n from ${sql.id(schema, 'events')}
    where status = 'pending' and group_key = ${group}`.execute(await inbox.kysely());
  return rows[0].n;
}

describe.runIf(postgresTarget)('groups', () => {
  const schemas = perTestSchemas(postgresTarget!);
  const grouped = (extra: Options['groups'] = {}): Options => ({
    mode: 'deferred',
    workers: 4,
    groups: { by: 'x-tenant', ...extra },
  });

  it("fair takes: a group's 50 events are applied while another's flood of 5,000 still waits", async () => {
    const t = schemas();
    const applied = { a: 0, b: 0 };
    let bDone = 0;
    // A tenant whose handler calls a slow API (5 per second per lane), and one whose does not.
    const handle: Handle = async (event) => {
      if (groupOf(event) === 'a') {
        await sleep(200);
        applied.a++;
      } else if (++applied.b === 50) bDone = performance.now();
    };
    const one = await instance(t.db, t.schema, grouped(), handle);
    const two = await instance(t.another(), t.schema, grouped(), handle);
    const began = performance.now();
    // The flood through the inbox's own entry (the adapters' path without the socket, which is
    // what would make 5,000 take long here); b's 50 over HTTP.
    let next = 0;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        for (let i = next++; i < 5000; i = next++) {
          const r = await one.inbox.receive({
            headers: { 'idempotency-key': `a-${i}`, 'x-tenant': 'a', 'content-type': 'application/json' },
            rawBody: Buffer.from('{}'),
          });
          expect(r.status).toBe(202);
        }
      }),
    );
    const aSent = performance.now();
    await sendAll(two.url, 'b', ids('b', 50), 10);
    await vi.waitFor(() => expect(applied.b).toBe(50), { timeout: 20_000, interval: 20 });
    const aWaiting = await waiting(one.inbox, t.schema, 'a');
    console.log(
      `fairness: a's 5,000 stored in ${Math.round(aSent - began)} ms; b's 50 all applied ${Math.round(bDone - aSent)} ms after b began; a then had ${aWaiting} waiting (${applied.a} applied)`,
    );
    expect(aWaiting).toBeGreaterThan(4000);
  }, 60_000);

  it('concurrency: at most 2 handlers of one group at once over two instances; other groups use the other lanes', async () => {
    const t = schemas();
    const running = new Map<string, number>();
    const most = new Map<string, number>();
    let now = 0;
    let mostAtOnce = 0;
    const handle: Handle = async (event) => {
      const g = groupOf(event);
      running.set(g, (running.get(g) ?? 0) + 1);
      most.set(g, Math.max(most.get(g) ?? 0, running.get(g)!));
      mostAtOnce = Math.max(mostAtOnce, ++now);
      await sleep(30);
      running.set(g, running.get(g)! - 1);
      now--;
    };
    const options = { ...grouped({ concurrency: 2 }), workerBatchSize: 1 };
    const one = await instance(t.db, t.schema, options, handle);
    const two = await instance(t.another(), t.schema, options, handle);
    await Promise.all(
      ['g1', 'g2', 'g3', 'g4'].map((g, i) => sendAll(i % 2 ? one.url : two.url, g, ids(g, 30), 8)),
    );
    await vi.waitFor(
      async () => {
        for (const g of ['g1', 'g2', 'g3', 'g4']) expect(await waiting(one.inbox, t.schema, g)).toBe(0);
        expect(now).toBe(0);
      },
      { timeout: 20_000, interval: 50 },
    );
    expect(Math.max(...most.values())).toBe(2);
    expect(mostAtOnce).toBeGreaterThan(4);
  }, 40_000);

  it("rate: '10/s' for a group over two instances, within 10 % over 20 s; another group is not slowed", async () => {
    const t = schemas();
    const times: number[] = [];
    let fastDone = 0;
    let fast = 0;
    const handle: Handle = (event) => {
      if (groupOf(event) === 'slow') times.push(performance.now());
      else if (++fast === 100) fastDone = times.length;
    };
    const options = grouped({ rate: { groups: { slow: '10/s' } } });
    const one = await instance(t.db, t.schema, options, handle);
    const two = await instance(t.another(), t.schema, options, handle);
    await Promise.all([
      sendAll(one.url, 'slow', ids('slow', 260), 16),
      sendAll(two.url, 'fast', ids('fast', 100), 16),
    ]);
    // The first second is the rate's burst; from then on, 20 s.
    await vi.waitFor(() => expect(times.at(-1)! - times[0]).toBeGreaterThan(21_000), {
      timeout: 40_000,
      interval: 100,
    });
    const from = times[0] + 1000;
    const inWindow = times.filter((at) => at >= from && at < from + 20_000).length;
    console.log(`rate: ${inWindow / 20}/s over 20 s; the other group's 100 done after ${fastDone} slow ones`);
    expect(inWindow / 20).toBeGreaterThanOrEqual(9);
    expect(inWindow / 20).toBeLessThanOrEqual(11);
    // Held to the slow group's rate, the fast group's 100 would finish after 100 slow ones.
    expect(fastDone).toBeLessThan(60);
  }, 60_000);

  it('RetryLater naming the group holds it until then, spends no attempt, and the group resumes in order', async () => {
    const t = schemas();
    const order: Array<{ id: string; at: number }> = [];
    let holdUntil = 0;
    const handle: Handle = (event) => {
      if (event.id === 'g-2' && holdUntil === 0) {
        holdUntil = Date.now() + 1500;
        throw new RetryLater({ at: new Date(holdUntil) }, { group: true });
      }
      order.push({ id: event.id, at: Date.now() });
    };
    const app = await instance(t.db, t.schema, grouped({ concurrency: 1 }), handle);
    await app.inbox.close();
    // Stored first, taken together once the workers run.
    const acker = await instance(t.another(), t.schema, { ...grouped(), workers: 0 }, handle);
    for (const id of ids('g', 5)) expect((await send(acker.url, 'g', id)).status).toBe(202);
    expect((await send(acker.url, 'other', 'o-1')).status).toBe(202);
    await instance(t.db, t.schema, grouped({ concurrency: 1 }), handle);
    await vi.waitFor(() => expect(order.map((e) => e.id)).toContain('g-5'), {
      timeout: 10_000,
      interval: 20,
    });
    const ofG = order.filter((e) => e.id.startsWith('g-'));
    expect(ofG.map((e) => e.id)).toEqual(['g-1', 'g-2', 'g-3', 'g-4', 'g-5']);
    for (const e of ofG.slice(1)) expect(e.at).toBeGreaterThanOrEqual(holdUntil - 50);
    expect(order.find((e) => e.id === 'o-1')!.at).toBeLessThan(holdUntil);
    const { rows } = await sql<{ attempts: number }>`select attempts from ${sql.id(t.schema, 'events')}
      where id = 'g-2'`.execute(await acker.inbox.kysely());
    expect(rows[0].attempts).toBe(0);
  }, 30_000);

  it("inline: past the group's in-flight cap, 429 + Retry-After; the retried delivery is applied once", async () => {
    const t = schemas();
    const applied: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let inHandler = 0;
    const handle: Handle = async (event) => {
      inHandler++;
      if (event.id === 'c-1' || event.id === 'c-2') await gate;
      applied.push(event.id);
    };
    const app = await instance(t.db, t.schema, { groups: { by: 'x-tenant', inFlight: 2 } }, handle);
    const first = [send(app.url, 'g', 'c-1'), send(app.url, 'g', 'c-2')];
    await vi.waitFor(() => expect(inHandler).toBe(2), { timeout: 5000, interval: 10 });
    const refused = await send(app.url, 'g', 'c-3');
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.body).toMatchObject({ reason: 'group' });
    // Another group is not capped by this one.
    expect((await send(app.url, 'h', 'h-1')).status).toBe(200);
    release();
    expect((await Promise.all(first)).map((r) => r.status)).toEqual([200, 200]);
    expect((await send(app.url, 'g', 'c-3')).status).toBe(200);
    expect((await send(app.url, 'g', 'c-3')).status).toBe(200);
    expect(applied.sort()).toEqual(['c-1', 'c-2', 'c-3', 'h-1']);
  });

  it("a SIGKILLed worker mid-handler frees its group's slot: every event applied once, each key in order", async () => {
    const t = schemas();
    const apps: LedgerServer[] = [];
    const ledgerOn = async (db: TargetDb['db'], workers: number) => {
      const app = await startLedger({
        ledgerSchema: t.appSchema,
        ingest: false,
        inbox: {
          db,
          schema: t.schema,
          logger: false,
          mode: 'deferred',
          workers,
          pollIntervalMs: 50,
          sweepIntervalMs: 50,
          groups: { by: 'x-tenant', concurrency: 1 },
        },
      });
      apps.push(app);
      return app;
    };
    open.push({ close: async () => void (await Promise.all(apps.map((a) => a.close()))) });
    const web = await ledgerOn(t.db, 0);
    const child = spawn(process.execPath, [childScript('test/support/deferred-worker.ts')], {
      env: {
        ...process.env,
        DATABASE_URL: postgresUrl!,
        INBOX_SCHEMA: t.schema,
        APP_SCHEMA: t.appSchema,
        HANG_SEQ: '999',
        HANG_ID: 'k-1',
        GROUP_BY: 'x-tenant',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = once(child, 'exit');
    try {
      let out = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString();
      });
      await vi.waitFor(() => expect(out).toContain('ready'), { timeout: 20_000, interval: 20 });
      const url = `${web.url}/webhooks`;
      const unordered = ids('k', 4);
      for (const id of unordered)
        expect((await post(url, { amount: 1 }, { 'idempotency-key': id, 'x-tenant': 'g' })).status).toBe(202);
      for (const seq of [1, 2, 3]) {
        const headers = {
          'idempotency-key': `s-${seq}`,
          'x-key': 'acct',
          'x-seq': String(seq),
          'x-tenant': 'g',
        };
        expect((await post(url, { amount: seq }, headers)).status).toBe(202);
      }
      await vi.waitFor(() => expect(out).toContain('hanging k-1'), { timeout: 20_000, interval: 20 });
      child.kill('SIGKILL');
      await exited;
      // Concurrency 1: the rescuer applies the group's events only once the dead session's slot is free.
      const rescuer = await ledgerOn(t.another(), 2);
      const db = await rescuer.inbox.kysely();
      await vi.waitFor(
        async () => {
          const { rows } = await sql<{
            n: number;
          }>`select count(*)::int as n from ${sql.id(t.schema, 'events')}
            where status <> 'processed'`.execute(db);
          expect(rows[0].n).toBe(0);
        },
        { timeout: 20_000, interval: 50 },
      );
      const none = await rescuer.ledger.account(db, 'none');
      expect(none.entries.map((e) => e.id).sort()).toEqual(unordered);
      const acct = await rescuer.ledger.account(db, 'acct');
      expect(acct.entries.map((e) => e.seq)).toEqual([1, 2, 3]);
    } finally {
      child.kill('SIGKILL');
    }
  }, 40_000);

  it('a group function that throws or gives a non-string: the event is stored without a group, counted, logged', async () => {
    const t = schemas();
    const errors: string[] = [];
    const logger = {
      debug() {},
      info() {},
      warn() {},
      error: (_: unknown, message: string) => errors.push(message),
    };
    const applied: string[] = [];
    const inbox = createInbox({
      db: t.db,
      schema: t.schema,
      logger,
      mode: 'deferred',
      pollIntervalMs: 50,
      groups: {
        by: (d) => {
          if (d.headers['x-tenant'] === 'boom') throw new Error('no tenant here');
          return (d.headers['x-tenant'] === 'object' ? {} : d.headers['x-tenant']) as string;
        },
        concurrency: 1,
      },
      handle: (event) => void applied.push(event.id),
    });
    open.push(inbox);
    expect(
      (
        await inbox.receive({
          headers: { 'idempotency-key': 'b-1', 'x-tenant': 'boom' },
          rawBody: Buffer.from('{}'),
        })
      ).status,
    ).toBe(202);
    expect(
      (
        await inbox.receive({
          headers: { 'idempotency-key': 'b-2', 'x-tenant': 'object' },
          rawBody: Buffer.from('{}'),
        })
      ).status,
    ).toBe(202);
    await vi.waitFor(() => expect(applied.sort()).toEqual(['b-1', 'b-2']), { timeout: 10_000, interval: 20 });
    expect(errors).toEqual([
      'webhook-inbox: groups.by threw: no tenant here; the event is stored without a group',
      'webhook-inbox: groups.by must give a string; got object; the event is stored without a group',
    ]);
    const { rows } = await sql<{
      group_key: string;
    }>`select group_key from ${sql.id(t.schema, 'events')}`.execute(await inbox.kysely());
    expect(rows.map((r) => r.group_key)).toEqual(['', '']);
  });

  it('visible: the busiest groups in the metrics and the CLI, with what runs of each', async () => {
    const t = schemas();
    const registry = new Registry();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let started = 0;
    const handle: Handle = async () => {
      started++;
      await gate;
    };
    const app = await instance(
      t.db,
      t.schema,
      { ...grouped({ concurrency: 1 }), workerBatchSize: 1, metrics: { registry } },
      handle,
    );
    await sendAll(app.url, 'big', ids('big', 6));
    await sendAll(app.url, 'small', ids('small', 2));
    await vi.waitFor(() => expect(started).toBe(2), { timeout: 10_000, interval: 20 });
    const text = await registry.metrics();
    expect(text).toContain('webhook_inbox_group_pending_events{source="default",group="big"} 6');
    expect(text).toContain('webhook_inbox_group_running{source="default",group="big"} 1');
    const run = await cli(['groups', '--schema', t.schema, '--json']);
    expect(run.code).toBe(0);
    expect(run.json.groups.map((g: any) => [g.group, g.pending, g.running])).toEqual([
      ['big', 6, 1],
      ['small', 2, 1],
    ]);
    release();
  });

  it("docs/groups.md's Shopify example is examples/groups/shopify.ts, and it runs: a store's 429 holds that store only", async () => {
    const file = readFileSync(new URL('../examples/groups/shopify.ts', import.meta.url), 'utf8');
    const docs = readFileSync(new URL('../docs/groups.md', import.meta.url), 'utf8');
    expect(docs).toContain(`\`\`\`ts\n${file.slice(file.indexOf('import '))}\`\`\``);
    const t = schemas();
    const calls: string[] = [];
    let limited = false;
    const inbox = shopInbox(
      'shpss_test',
      async (shop, order) => {
        if (shop === 'a.myshopify.com' && !limited) {
          limited = true;
          return new Response(null, { status: 429, headers: { 'retry-after': '1' } });
        }
        calls.push(`${shop}:${order.id}`);
        return new Response('{}', { status: 200 });
      },
      { db: t.db, schema: t.schema },
    );
    open.push(inbox);
    const deliver = async (shop: string, id: number) => {
      const { headers, rawBody } = signedDelivery('shopify', { id }, { secret: 'shpss_test' });
      const shopHeader = { 'x-shopify-shop-domain': `${shop}.myshopify.com` };
      expect((await inbox.receive({ headers: { ...headers, ...shopHeader }, rawBody })).status).toBe(202);
    };
    await deliver('a', 1);
    await vi.waitFor(() => expect(limited).toBe(true), { timeout: 10_000, interval: 20 });
    await deliver('a', 2);
    await deliver('b', 1);
    await vi.waitFor(() => expect(calls).toHaveLength(3), { timeout: 10_000, interval: 20 });
    expect(calls[0]).toBe('b.myshopify.com:1');
    expect(calls.slice(1).sort()).toEqual(['a.myshopify.com:1', 'a.myshopify.com:2']);
  });

  it('bad options name the option', () => {
    const make = (groups: unknown) => () =>
      createInbox({ db: 'postgres://x', handle() {}, groups } as InboxOptions);
    expect(make({ concurrency: 0 })).toThrow(InboxOptionsError);
    expect(make({ by: 'x-tenant', concurrency: 0 })).toThrow(/`groups\.concurrency` must be an integer/);
    expect(make({ by: 'x-tenant', rate: '5 per second' })).toThrow(
      /`groups\.rate` must be events per period/,
    );
    expect(make({ concurrency: 2 })).toThrow(/`groups\.by` is required/);
    expect(make({ by: 'x-tenant', limit: 2 })).toThrow(/`groups\.limit` is not an option/);
  });
});

describe('groups on PGlite', () => {
  const schemas = perTestSchemas(pgliteTarget);
  it('a grouped, limited, deferred inbox applies every event of every group', async () => {
    const t = schemas();
    const applied: string[] = [];
    const inbox = createInbox({
      db: t.db,
      schema: t.schema,
      logger: false,
      mode: 'deferred',
      pollIntervalMs: 50,
      groups: { by: 'x-tenant', concurrency: 1, rate: { groups: { b: '100/s' } } },
      handle: (event) => void applied.push(event.id),
    });
    open.push(inbox);
    for (const id of ['a-1', 'a-2', 'b-1', 'b-2'])
      await inbox.receive({
        headers: { 'idempotency-key': id, 'x-tenant': id[0] },
        rawBody: Buffer.from('{}'),
      });
    await vi.waitFor(() => expect(applied.sort()).toEqual(['a-1', 'a-2', 'b-1', 'b-2']), {
      timeout: 10_000,
      interval: 20,
    });
    const groups = await (await inbox.operations()).groups();
    expect(groups).toEqual([]);
  });
});
