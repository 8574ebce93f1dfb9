/**
 * Handlers by event type (option `handlers`): an event reaches the handler registered for its
 * type (exact, then its one-level family, then `'*'`), in the claim's transaction as `handle`
 * would; an event no handler takes is answered 200 `ignored`, recorded `ignored` with its type
 * and payload, counted by type, listed by the operator (CLI and console), and applied once by
 * `ignored replay --type T` when a handler exists. Over the Express adapter (a real socket), on
 * every target.
 */
import { randomUUID } from 'node:crypto';
import express from 'express';
import { sql } from 'kysely';
import { Registry } from 'prom-client';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { inbox as expressInbox } from '../adapters/express.js';
import type { CliIo } from '../src/cli/command.js';
import { main } from '../src/cli/main.js';
import { createConsole } from '../src/console/index.js';
import {
  createInbox,
  type Handler,
  type Handlers,
  type Inbox,
  type InboxOptions,
  InboxOptionsError,
} from '../src/index.js';
import { resolveHandlers } from '../src/options/handlers.js';
import { postgresUrl, suiteDatabase, type Target, targets, uniqueName } from './support/databases.js';

describe('which handler a type reaches', () => {
  const named = (name: string): Handler => Object.assign(() => name, { handlerName: name });
  const route = resolveHandlers({
    'invoice.paid': named('invoice.paid'),
    'invoice.*': named('invoice.*'),
    'customer.*': named('customer.*'),
    'customer.subscription.*': named('customer.subscription.*'),
    'orders/*': named('orders/*'),
    '*': named('*'),
  });
  const withoutFallback = resolveHandlers({ 'invoice.paid': named('exact'), 'customer.*': named('family') });
  const cases: Array<[type: string | null, expected: string | undefined, router?: typeof route]> = [
    ['invoice.paid', 'invoice.paid'], // the exact name wins over its family
    ['invoice.created', 'invoice.*'],
    ['customer.created', 'customer.*'],
    ['customer.subscription.created', 'customer.subscription.*'], // its own family, not customer.*
    ['customer.subscription.trial.ended', '*'], // one level: no family of its own is registered
    ['orders/create', 'orders/*'], // Shopify's separator
    ['orders/items/create', '*'],
    ['invoice', '*'], // one segment has no family
    ['invoice.', '*'], // an empty last segment is no member
    ['charge.refunded', '*'],
    [null, '*'], // no type: only the fallback takes it
    ['customer.updated', 'family', withoutFallback],
    ['customer.subscription.created', undefined, withoutFallback],
    ['charge.refunded', undefined, withoutFallback],
    [null, undefined, withoutFallback],
  ];
  test.each(cases)('%s → %s', (type, expected, router = route) => {
    const handler = router(type) as (Handler & { handlerName?: string }) | undefined;
    expect(handler?.handlerName).toBe(expected);
  });

  const one = (): number => 1;
  test.each([
    [{ handle: one, handlers: { '*': one } }, 'handlers'],
    [{}, 'handle'],
    [{ handlers: {} }, 'handlers'],
    [{ handlers: [] }, 'handlers'],
    [{ handlers: { 'invoice.paid': 'nope' } }, 'handlers["invoice.paid"]'],
    [{ handlers: { 'customer*': one } }, 'handlers["customer*"]'],
    [{ handlers: { '*.created': one } }, 'handlers["*.created"]'],
    [{ handlers: { 'customer.**': one } }, 'handlers["customer.**"]'],
    [{ handlers: { '.*': one } }, 'handlers[".*"]'],
    [{ handlers: { '': one } }, 'handlers[""]'],
    [{ handlers: { '*': one }, fields: { kind: '/kind' } }, 'fields.kind'],
  ])('option set %# is refused naming %s', (options, option) => {
    expect(() => createInbox({ db: 'memory', ...(options as InboxOptions) })).toThrow(
      expect.objectContaining({ name: InboxOptionsError.name, option }),
    );
  });
});

describe.each(targets)('handlers by event type on $name', (target: Target) => {
  const suite = suiteDatabase(target);

  interface Ran {
    handler: string;
    id: string;
    type: string | null;
    attempt: number;
  }

  /** An inbox over Express whose handlers record their runs in the app's table, in the claim's transaction. */
  async function app(
    handlers: Record<string, string>,
    options: Partial<InboxOptions> = {},
    schema = uniqueName('wi'),
  ) {
    const registry = new Registry();
    const runs: Ran[] = [];
    const db = suite.db();
    const appTable = `${db.appSchema}.runs`;
    const recording =
      (name: string): Handler =>
      async (event, { tx }) => {
        runs.push({ handler: name, id: event.id, type: event.type, attempt: event.attempt });
        await sql`insert into ${sql.raw(appTable)} (id, handler) values (${event.id}, ${name})`.execute(tx);
        return { by: name };
      };
    const inbox = createInbox({
      db: db.db,
      schema,
      sweepIntervalMs: 0,
      fields: { type: '/type' },
      metrics: { registry },
      handlers: Object.fromEntries(
        Object.entries(handlers).map(([pattern, name]) => [pattern, recording(name)]),
      ),
      ...options,
    });
    suite.track(inbox);
    const k = await inbox.kysely();
    await sql`create schema if not exists ${sql.id(db.appSchema)}`.execute(k);
    await sql`create table if not exists ${sql.raw(appTable)} (id text, handler text)`.execute(k);
    const server = express().use('/webhooks', expressInbox(inbox));
    const post = (id: string, body: unknown, headers: Record<string, string> = {}) =>
      request(server)
        .post('/webhooks')
        .set({ 'content-type': 'application/json', 'idempotency-key': id, ...headers })
        .send(JSON.stringify(body));
    const applied = async (id: string) =>
      (
        await sql<{ handler: string }>`select handler from ${sql.raw(appTable)} where id = ${id}`.execute(k)
      ).rows.map((r) => r.handler);
    const row = async (id: string) =>
      (
        await sql<any>`select status, type, payload is not null as kept, result from ${sql.raw(`"${schema}".events`)}
                        where id = ${id}`.execute(k)
      ).rows[0];
    return { inbox, post, runs, applied, row, registry, schema };
  }

  test('each type reaches its handler in the claim transaction, with event.type; an unhandled one is 200 ignored, recorded once', async () => {
    const { post, runs, applied, row, registry } = await app({
      'invoice.paid': 'paid',
      'customer.*': 'customer',
    });
    const paid = `evt_${randomUUID()}`;
    const created = `evt_${randomUUID()}`;
    const refunded = `evt_${randomUUID()}`;
    const r1 = await post(paid, { type: 'invoice.paid', amount: 5 });
    expect(r1.status).toBe(200);
    expect(r1.body).toEqual({ status: 'processed', id: paid, result: { by: 'paid' } });
    expect((await post(created, { type: 'customer.created' })).body.result).toEqual({ by: 'customer' });
    expect(runs.map((r) => [r.handler, r.type])).toEqual([
      ['paid', 'invoice.paid'],
      ['customer', 'customer.created'],
    ]);

    const ignored = await post(refunded, { type: 'charge.refunded', amount: 7 });
    expect(ignored.status).toBe(200);
    expect(ignored.body).toEqual({ status: 'ignored', id: refunded, type: 'charge.refunded' });
    expect(await row(refunded)).toMatchObject({ status: 'ignored', type: 'charge.refunded', kept: true });
    expect(await row(paid)).toMatchObject({ status: 'processed', type: 'invoice.paid', kept: false });
    // A redelivery is answered as ignored again, replayed, and still applies nothing.
    const again = await post(refunded, { type: 'charge.refunded', amount: 7 });
    expect(again.status).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual({ status: 'ignored', id: refunded, type: 'charge.refunded' });
    expect(await applied(refunded)).toEqual([]);
    expect(await applied(paid)).toEqual(['paid']);
    expect(runs).toHaveLength(2);

    const text = await registry.metrics();
    expect(text).toMatch(/webhook_inbox_ignored_total\{source="default",type="charge\.refunded"\} 1\n/);
    expect(text).toMatch(/webhook_inbox_deliveries_total\{source="default",outcome="ignored"\} 2\n/);
  });

  test('a handler that throws fails as handle would: its writes rolled back, retried, applied once', async () => {
    let fail = true;
    const id = `evt_${randomUUID()}`;
    const { post, applied } = await app(
      {},
      {
        handlers: {
          'x.*': async (_event, { tx }) => {
            await sql`insert into ${sql.raw(`${suite.db().appSchema}.runs`)} (id, handler) values (${id}, 'x')`.execute(
              tx,
            );
            if (fail) throw new Error('not yet');
            return null;
          },
        },
      },
    );
    expect((await post(id, { type: 'x.y' })).status).toBe(500);
    expect(await applied(id)).toEqual([]);
    fail = false;
    expect((await post(id, { type: 'x.y' })).status).toBe(200);
    expect(await applied(id)).toEqual(['x']);
  });

  test('ordered: an ignored event takes its turn and moves the cursor; the held one behind it is applied', async () => {
    const { post, row, applied } = await app({ 'a.b': 'ab' });
    const key = `k_${randomUUID()}`;
    const second = `${key}-2`;
    const first = `${key}-1`;
    expect((await post(second, { type: 'a.b' }, { 'x-key': key, 'x-seq': '2' })).status).toBe(202);
    const r = await post(first, { type: 'c.d' }, { 'x-key': key, 'x-seq': '1' });
    expect(r.body).toMatchObject({ status: 'ignored', type: 'c.d' });
    expect(await row(first)).toMatchObject({ status: 'ignored', type: 'c.d', kept: true });
    expect(await row(second)).toMatchObject({ status: 'processed', type: 'a.b' });
    expect(await applied(second)).toEqual(['ab']);
    // Another id at the ignored seq is refused as at an applied one.
    const other = await post(`${key}-x`, { type: 'a.b' }, { 'x-key': key, 'x-seq': '1' });
    expect(other.status).toBe(422);
    expect(other.body.field).toBe('x-seq');
  });

  test('deferred mode: the worker records an event no handler takes as ignored', async () => {
    const { inbox, post, row } = await app({ 'a.b': 'ab' }, { mode: 'deferred', workers: 1 });
    const id = `evt_${randomUUID()}`;
    expect((await post(id, { type: 'z.z' })).status).toBe(202);
    await inbox.sweep();
    await inbox.idle();
    expect(await row(id)).toMatchObject({ status: 'ignored', type: 'z.z', kept: true });
    const again = await post(id, { type: 'z.z' });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ status: 'ignored' });
  });

  test('latest wins: an ignored event is recorded and its redelivery answered ignored', async () => {
    const { post, row } = await app(
      { 'a.b': 'ab' },
      { order: { policy: 'latest', key: '/object', version: '/version' } },
    );
    const id = `evt_${randomUUID()}`;
    const object = `obj_${randomUUID()}`;
    expect((await post(id, { type: 'z.z', object, version: 1 })).body).toMatchObject({ status: 'ignored' });
    expect(await row(id)).toMatchObject({ status: 'ignored', type: 'z.z', kept: true });
    expect((await post(id, { type: 'z.z', object, version: 1 })).body).toMatchObject({ status: 'ignored' });
  });

  test('retention prunes ignored events as it prunes processed ones', async () => {
    const { inbox, post, row } = await app({ 'a.b': 'ab' });
    const id = `evt_${randomUUID()}`;
    await post(id, { type: 'z.z' });
    expect((await inbox.prune({ olderThan: '1h' })).pruned).toBe(0);
    await sql`update ${sql.raw(`"${inbox.options.schema}".events`)} set processed_at = now() - interval '2 hours'
               where id = ${id}`.execute(await inbox.kysely());
    expect(await inbox.prune({ olderThan: '1h' })).toMatchObject({ pruned: 1 });
    expect(await row(id)).toBeUndefined();
  });

  test('inbox.replayIgnored applies the ignored events of a type once a handler exists; a second call applies nothing', async () => {
    const schema = uniqueName('wi');
    const before = await app({ 'a.b': 'ab' }, {}, schema);
    const ids = [`evt_${randomUUID()}`, `evt_${randomUUID()}`];
    for (const id of ids) expect((await before.post(id, { type: 'c.d' })).body.status).toBe('ignored');
    const other = `evt_${randomUUID()}`;
    await before.post(other, { type: 'e.f' });
    // The next deployment has a handler for c.d.
    const after = await app({ 'a.b': 'ab', 'c.d': 'cd' }, {}, schema);
    const first = await after.inbox.replayIgnored('c.d');
    expect(first).toMatchObject({ type: 'c.d', requeued: 2, ordered: 0 });
    expect([...first.ids].sort()).toEqual([...ids].sort());
    for (const id of ids) {
      expect(await after.applied(id)).toEqual(['cd']);
      expect(await after.row(id)).toMatchObject({ status: 'processed', type: 'c.d', kept: false });
    }
    expect(await after.inbox.replayIgnored('c.d')).toMatchObject({ requeued: 0, ids: [] });
    for (const id of ids) expect(await after.applied(id)).toEqual(['cd']);
    expect(await after.row(other)).toMatchObject({ status: 'ignored' });
  });
});

describe.skipIf(!postgresUrl)('the operator sees ignored events: CLI and console', () => {
  const schema = uniqueName('wi');
  let inbox: Inbox;
  let later: Inbox;
  const runs: string[] = [];
  const handlers: Handlers = { 'a.b': () => null };

  function io() {
    const out: string[] = [];
    const err: string[] = [];
    const value: CliIo = { stdout: (t) => out.push(t), stderr: (t) => err.push(t), raw: () => {} };
    return { out, err, io: value, json: () => JSON.parse(out.join('\n')) };
  }
  const cli = async (args: string[]) => {
    const run = io();
    const code = await main([...args, '--db', postgresUrl!, '--schema', schema, '--json'], {}, run.io);
    return { code, json: code === 0 ? run.json() : undefined, err: run.err.join('\n') };
  };

  beforeAll(async () => {
    inbox = createInbox({
      db: postgresUrl!,
      schema,
      sweepIntervalMs: 0,
      fields: { type: '/type' },
      handlers,
    });
    later = createInbox({
      db: postgresUrl!,
      schema,
      sweepIntervalMs: 0,
      fields: { type: '/type' },
      handlers: { ...handlers, 'c.d': (event) => void runs.push(event.id) },
    });
  });
  afterAll(async () => {
    await sql`drop schema if exists ${sql.id(schema)} cascade`.execute(await inbox.kysely());
    await inbox.close();
    await later.close();
  });

  const deliver = (id: string, type: string, extra: Record<string, string> = {}) =>
    inbox.receive({
      headers: { 'content-type': 'application/json', 'idempotency-key': id, ...extra },
      rawBody: Buffer.from(JSON.stringify({ type })),
    });

  test('ignored list by type; ignored replay --type applies them once, a second run applies nothing', async () => {
    const ids = [`e1_${randomUUID()}`, `e2_${randomUUID()}`];
    for (const id of ids) expect((await deliver(id, 'c.d')).body.status).toBe('ignored');
    await deliver(`e3_${randomUUID()}`, 'g.h');
    const key = `k_${randomUUID()}`;
    expect((await deliver(`o_${randomUUID()}`, 'c.d', { 'x-key': key, 'x-seq': '1' })).body.status).toBe(
      'ignored',
    );

    const all = await cli(['ignored', 'list']);
    expect(all.code).toBe(0);
    expect(all.json.types).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ type: 'c.d', count: 3 }),
        expect.objectContaining({ type: 'g.h', count: 1 }),
      ]),
    );
    const listed = await cli(['ignored', 'list', '--type', 'c.d']);
    expect(listed.json.events.map((e: { type: string }) => e.type)).toEqual(['c.d', 'c.d', 'c.d']);
    expect(listed.json.types).toEqual([]);

    const usage = await cli(['ignored', 'replay']);
    expect(usage.code).toBe(2);
    expect(usage.err).toContain('--type');

    const dry = await cli(['ignored', 'replay', '--type', 'c.d', '--dry-run']);
    expect(dry.json).toMatchObject({ requeued: 2, ordered: 1, dryRun: true });
    const replayed = await cli(['ignored', 'replay', '--type', 'c.d']);
    expect(replayed.code).toBe(0);
    expect(replayed.json).toMatchObject({ type: 'c.d', requeued: 2, ordered: 1, dryRun: false });
    // The application (with its c.d handler now) applies them on its sweeper's pass.
    await later.sweep();
    expect([...runs].sort()).toEqual([...ids].sort());
    for (const id of ids) expect((await later.event(id))?.status).toBe('processed');
    expect((await cli(['ignored', 'replay', '--type', 'c.d'])).json).toMatchObject({
      requeued: 0,
      ordered: 1,
    });
    await later.sweep();
    expect(runs).toHaveLength(2);
  });

  test('the console lists ignored events by type, and the overview counts them', async () => {
    await deliver(`e4_${randomUUID()}`, 'k.l');
    const token = 'ignored-console-token-0123456789';
    const console = createConsole({ inbox, token });
    const headers = { authorization: `Bearer ${token}` };
    const page = await console.handle({ method: 'GET', url: '/ignored?type=k.l', headers });
    expect(page.status).toBe(200);
    expect(page.body).toContain('<code>k.l</code>');
    expect(page.body).toMatch(/<td>k\.l<\/td>/);
    const overview = await console.handle({ method: 'GET', url: '/', headers });
    expect(overview.body).toMatch(/href="\/ignored\?type=k\.l">k\.l<\/a><\/td><td>1<\/td>/);
  });
});
