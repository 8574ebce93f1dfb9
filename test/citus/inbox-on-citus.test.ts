/**
 * The inbox on a Citus cluster, its tables distributed by stream and colocated with a user's
 * `orders` table distributed by account: the claim, ordering, deferred workers, races and the
 * operators' actions, each checked by what a sender and the user's tables see, and the inbox's
 * invariants after each test. Every statement the inbox sends must be one Citus runs.
 */
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  createInbox,
  type Delivery,
  type Inbox,
  type InboxOptions,
  InboxOptionsError,
} from '../../src/index.js';
import { checkInvariants } from '../../src/testing/index.js';
import { cli } from '../support/cli.js';
import { uniqueName } from '../support/databases.js';
import { invariantsHoldAfterEach, watchInvariants } from '../support/invariants.js';

const url = inject('citusUrl');
const pools: pg.Pool[] = [];
const schemas: string[] = [];
let admin: pg.Pool;

function pool(): pg.Pool {
  const p = new pg.Pool({ connectionString: url, max: 10 });
  p.on('error', () => {});
  pools.push(p);
  return p;
}

beforeAll(() => {
  admin = pool();
});
afterAll(async () => {
  for (const s of schemas) await admin.query(`drop schema if exists "${s}" cascade`).catch(() => {});
  await Promise.all(pools.map((p) => p.end().catch(() => {})));
});
invariantsHoldAfterEach();

/** A user's schema with `orders` distributed by account_id, and a handler that adds to it. */
async function ordersSchema(): Promise<string> {
  const app = uniqueName('app');
  schemas.push(app);
  await admin.query(`create schema "${app}"`);
  await admin.query(`create table "${app}".orders (account_id text not null, id text not null, amount int not null,
                     primary key (account_id, id))`);
  await admin.query(`select create_distributed_table('"${app}".orders', 'account_id')`);
  return app;
}

interface Body {
  account: string;
  amount: number;
  /** Another account the handler also writes to: a write on another shard. */
  also?: string;
  fail?: boolean;
  /** The event's type, for the inboxes routing by it (`handlers`). */
  type?: string;
}

async function citusInbox(app: string, options: Partial<InboxOptions<Body>> = {}, schema = uniqueName('wi')) {
  if (!schemas.includes(schema)) schemas.push(schema);
  const inbox = watchInvariants(
    createInbox<Body>({
      db: pool(),
      schema,
      citus: { colocateWith: `${app}.orders` },
      sweepIntervalMs: 0,
      retryBaseMs: 1,
      retryCapMs: 1,
      ...options,
      handle: async (event, { tx }) => {
        const { account, amount, also, fail } = event.body;
        await sql`insert into ${sql.table(`${app}.orders`)} (account_id, id, amount)
                  values (${account}, ${event.id}, ${amount})`.execute(tx);
        if (also) {
          await sql`insert into ${sql.table(`${app}.orders`)} (account_id, id, amount)
                    values (${also}, ${event.id}, ${amount})`.execute(tx);
        }
        if (fail) throw new Error('fail on purpose');
        return { account, amount };
      },
    } as InboxOptions<Body>),
  );
  await inbox.ready();
  return { inbox, schema };
}

function delivery(id: string, body: Body, order?: { key: string; seq: number }): Delivery {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'idempotency-key': id };
  if (order) {
    headers['x-key'] = order.key;
    headers['x-seq'] = String(order.seq);
  }
  return { headers, rawBody: Buffer.from(JSON.stringify(body)) };
}

async function orders(db: Kysely<any>, app: string, account: string): Promise<string[]> {
  const { rows } = await sql<{ id: string }>`select id from ${sql.table(`${app}.orders`)}
                                               where account_id = ${account} order by id`.execute(db);
  return rows.map((r) => r.id);
}

/** Waits until nothing waits in the inbox's table and its workers are idle. */
async function settle(inbox: Inbox, schema: string): Promise<void> {
  const db = await inbox.kysely();
  for (;;) {
    await inbox.idle();
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from ${sql.table(`${schema}.events`)}
                                               where status in ('pending', 'held')`.execute(db);
    if (rows[0].n === 0) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('the inbox on a Citus cluster', () => {
  let app: string;
  beforeAll(async () => {
    app = await ordersSchema();
  });

  it('distributes its four tables, colocated with the orders table', async () => {
    const { inbox, schema } = await citusInbox(app);
    const { rows } = await admin.query(
      `select logicalrelid::text as t, column_to_column_name(logicalrelid, partkey) as col, colocationid
         from pg_dist_partition where logicalrelid::text like $1 or logicalrelid::text = $2 order by 1`,
      [`${schema}.%`, `${app}.orders`],
    );
    expect(rows.map((r) => [r.t, r.col])).toEqual([
      [`${app}.orders`, 'account_id'],
      [`${schema}.events`, 'stream'],
      [`${schema}.gaps`, 'stream'],
      [`${schema}.groups`, 'group_key'],
      [`${schema}.keys`, 'stream'],
    ]);
    expect(new Set(rows.map((r) => r.colocationid)).size).toBe(1);
    await inbox.close();
  });

  it('the CLI: `migrate --colocate-with` creates and distributes the tables, once', async () => {
    const schema = uniqueName('wi');
    schemas.push(schema);
    const migrate = [
      'migrate',
      '--db',
      url,
      '--schema',
      schema,
      '--colocate-with',
      `${app}.orders`,
      '--json',
    ];
    const first = await cli(migrate);
    expect([first.code, first.stderr, first.json?.migrated]).toEqual([0, '', true]);
    const { rows } = await admin.query(
      `select logicalrelid::text as t, column_to_column_name(logicalrelid, partkey) as col,
              colocationid = (select colocationid from pg_dist_partition where logicalrelid = $2::regclass) as colocated
         from pg_dist_partition where logicalrelid::text like $1 order by 1`,
      [`${schema}.%`, `${app}.orders`],
    );
    expect(rows).toEqual(
      ['events', 'gaps', 'groups', 'keys'].map((t) => ({
        t: `${schema}.${t}`,
        col: t === 'groups' ? 'group_key' : 'stream',
        colocated: true,
      })),
    );
    const again = await cli(migrate);
    expect([again.code, again.json?.ran]).toEqual([0, []]);
    const bad = await cli(['migrate', '--db', url, '--colocate-with', 'Orders; drop', '--json']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--colocate-with must name a distributed table');
  });

  it('refuses the groups option beside citus, naming both', () => {
    const open = () =>
      createInbox({ db: url, citus: {}, groups: { by: '/account', concurrency: 1 }, handle: () => {} });
    expect(open).toThrow(InboxOptionsError);
    expect(open).toThrow(/option `groups` cannot be combined with `citus`/);
  });

  it('applies a new event once, answers its copies as duplicates, and refuses its id under a key', async () => {
    const { inbox } = await citusInbox(app);
    const body = { account: 'acct-core', amount: 5 };
    expect((await inbox.receive(delivery('core-1', body))).kind).toBe('processed');
    expect((await inbox.receive(delivery('core-1', body))).kind).toBe('duplicate');
    const again = await inbox.receive(delivery('core-1', body, { key: 'acct-core', seq: 1 }));
    expect(again.kind).toBe('mismatch');
    expect(await orders(await inbox.kysely(), app, 'acct-core')).toEqual(['core-1']);
    await inbox.close();
  });

  it('rolls back a failed handler, writes on another shard included, and applies the retry once', async () => {
    const { inbox } = await citusInbox(app);
    const db = await inbox.kysely();
    const failing = { account: 'acct-a', amount: 1, also: 'acct-b', fail: true };
    expect((await inbox.receive(delivery('two-shards', failing))).kind).toBe('failed');
    expect([await orders(db, app, 'acct-a'), await orders(db, app, 'acct-b')]).toEqual([[], []]);
    const fixed = { account: 'acct-a', amount: 1, also: 'acct-b' };
    expect((await inbox.receive(delivery('two-shards', fixed))).kind).toBe('mismatch');
    expect((await inbox.receive(delivery('two-shards-2', fixed))).kind).toBe('processed');
    expect([await orders(db, app, 'acct-a'), await orders(db, app, 'acct-b')]).toEqual([
      ['two-shards-2'],
      ['two-shards-2'],
    ]);
    await inbox.close();
  });

  it('holds early seqs and applies a key in order, inline', async () => {
    const { inbox } = await citusInbox(app);
    const key = 'acct-ordered';
    const kinds = [];
    for (const seq of [3, 2, 1, 4]) {
      kinds.push(
        (await inbox.receive(delivery(`ord-${seq}`, { account: key, amount: seq }, { key, seq }))).kind,
      );
    }
    expect(kinds).toEqual(['held', 'held', 'processed', 'processed']);
    await inbox.drain(key, true);
    expect(await orders(await inbox.kysely(), app, key)).toEqual(['ord-1', 'ord-2', 'ord-3', 'ord-4']);
    await inbox.close();
  });

  it('skips a timed-out gap in the sweeper and dead-letters the late seq', async () => {
    const { inbox } = await citusInbox(app, { gapTimeoutMs: 1 });
    const key = 'acct-gap';
    expect((await inbox.receive(delivery('gap-2', { account: key, amount: 2 }, { key, seq: 2 }))).kind).toBe(
      'held',
    );
    await new Promise((r) => setTimeout(r, 5)); // the gap's timeout is the point of this test
    await inbox.sweep();
    await inbox.drain(key, true);
    expect(await orders(await inbox.kysely(), app, key)).toEqual(['gap-2']);
    const late = await inbox.receive(delivery('gap-1', { account: key, amount: 1 }, { key, seq: 1 }));
    expect([late.kind, (late.body as { reason?: string }).reason]).toEqual(['dead-lettered', 'late']);
    await inbox.close();
  });

  it('deferred: workers take unordered and ordered events across shards, each applied once, in order', async () => {
    const schema = uniqueName('wi');
    const ack = await citusInbox(app, { mode: 'deferred', workers: 0 }, schema);
    // Listening before the claims: their wake-ups name the keys to take.
    const workers = await Promise.all(
      [0, 1].map(() => citusInbox(app, { mode: 'deferred', workers: 3, workerBatchSize: 4 }, schema)),
    );
    const events: Delivery[] = [];
    for (let i = 0; i < 30; i++)
      events.push(delivery(`def-u-${i}`, { account: `acct-u${i % 7}`, amount: i }));
    for (let seq = 1; seq <= 10; seq++) {
      for (const key of ['acct-k1', 'acct-k2', 'acct-k3'])
        events.push(delivery(`def-${key}-${seq}`, { account: key, amount: seq }, { key, seq }));
    }
    const kinds = await Promise.all(events.map((d) => ack.inbox.receive(d)));
    expect(new Set(kinds.map((o) => o.kind))).toEqual(new Set(['pending', 'held']));
    for (const w of workers) await settle(w.inbox, schema);
    const db = await ack.inbox.kysely();
    for (const key of ['acct-k1', 'acct-k2', 'acct-k3']) {
      expect(await orders(db, app, key)).toEqual(
        Array.from({ length: 10 }, (_, i) => `def-${key}-${i + 1}`).sort(),
      );
      // processed_at is each transaction's start, which a take waiting for the key's turn began
      // before the previous seq committed: the order is the key's cursor, checked by checkInvariants.
      const { rows } = await sql<{ id: string }>`select id from ${sql.table(`${schema}.events`)}
        where stream = ${key} and status = 'processed' order by seq`.execute(db);
      expect(rows.map((r) => r.id)).toEqual(Array.from({ length: 10 }, (_, i) => `def-${key}-${i + 1}`));
    }
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from ${sql.table(`${app}.orders`)}
                                               where id like 'def-u-%'`.execute(db);
    expect(rows[0].n).toBe(30);
    // The invariants' own queries run on the cluster (each joins a key's rows on their shard).
    expect(await checkInvariants(admin, { schema })).toEqual([]);
    for (const w of [ack, ...workers]) await w.inbox.close();
  });

  it('races: 20 simultaneous copies of an event, and of each seq of a key, from two instances, apply once', async () => {
    const schema = uniqueName('wi');
    const a = await citusInbox(app, {}, schema);
    const b = await citusInbox(app, {}, schema);
    const key = 'acct-race';
    const sends: Promise<unknown>[] = [];
    for (let copy = 0; copy < 10; copy++) {
      for (const inbox of [a.inbox, b.inbox]) {
        sends.push(inbox.receive(delivery('race-1', { account: 'acct-race-u', amount: 1 })));
        for (const seq of [1, 2, 3]) {
          sends.push(inbox.receive(delivery(`race-k-${seq}`, { account: key, amount: seq }, { key, seq })));
        }
      }
    }
    await Promise.all(sends);
    // A copy that found its id in flight was answered 409: the sender sends it again.
    for (const seq of [1, 2, 3])
      await a.inbox.receive(delivery(`race-k-${seq}`, { account: key, amount: seq }, { key, seq }));
    await a.inbox.drain(key, true);
    const db = await a.inbox.kysely();
    expect(await orders(db, app, 'acct-race-u')).toEqual(['race-1']);
    expect(await orders(db, app, key)).toEqual(['race-k-1', 'race-k-2', 'race-k-3']);
    await a.inbox.close();
    await b.inbox.close();
  });

  it("operators: a dead letter replayed, skipped keys, and retention's prune", async () => {
    const { inbox } = await citusInbox(app, { maxAttempts: 1, onPoison: 'block', retention: false });
    const key = 'acct-ops';
    const bad = { account: key, amount: 1, fail: true };
    expect((await inbox.receive(delivery('ops-1', bad, { key, seq: 1 }))).kind).toBe('dead-lettered');
    expect((await inbox.receive(delivery('ops-2', { account: key, amount: 2 }, { key, seq: 2 }))).kind).toBe(
      'held',
    );
    expect((await inbox.keys({ blocked: true })).map((k) => k.key)).toEqual([key]);
    await inbox.skip({ key });
    await inbox.drain(key, true);
    expect(await orders(await inbox.kysely(), app, key)).toEqual(['ops-2']);
    expect(
      (await inbox.receive(delivery('ops-u', { account: 'acct-ops-u', amount: 1, fail: true }))).kind,
    ).toBe('dead-lettered');
    const [replayed] = await inbox.replay('ops-u');
    expect(replayed.outcome).toBe('requeued');
    const pruned = await inbox.prune({ olderThan: '0ms' });
    expect(pruned.pruned).toBeGreaterThan(0);
    await inbox.close();
  });

  it('operators: ignored events of a type, replayed once a handler takes it, apply once', async () => {
    const schema = uniqueName('wi');
    schemas.push(schema);
    const open = async (types: string[]) => {
      const inbox = watchInvariants(
        createInbox<Body>({
          db: pool(),
          schema,
          citus: { colocateWith: `${app}.orders` },
          sweepIntervalMs: 0,
          fields: { type: '/type' },
          handlers: Object.fromEntries(
            types.map((type) => [
              type,
              async (event: { id: string; body: Body }, { tx }: { tx: Kysely<any> }) => {
                await sql`insert into ${sql.table(`${app}.orders`)} (account_id, id, amount)
                          values (${event.body.account}, ${event.id}, ${event.body.amount})`.execute(tx);
              },
            ]),
          ),
        } as InboxOptions<Body>),
      );
      await inbox.ready();
      return inbox;
    };
    const before = await open(['order.created']);
    const paid = (i: number) =>
      delivery(`ign-${i}`, { type: 'order.paid', account: `acct-ign${i}`, amount: i });
    for (const i of [1, 2, 3]) expect((await before.receive(paid(i))).kind).toBe('ignored');
    await before.close();
    const after = await open(['order.created', 'order.paid']);
    expect(await after.replayIgnored('order.paid')).toMatchObject({ requeued: 3, ordered: 0 });
    await settle(after, schema);
    const db = await after.kysely();
    for (const i of [1, 2, 3]) expect(await orders(db, app, `acct-ign${i}`)).toEqual([`ign-${i}`]);
    expect((await after.receive(paid(1))).kind).toBe('duplicate');
    expect(await after.replayIgnored('order.paid')).toMatchObject({ requeued: 0 });
    await after.close();
  });
});
