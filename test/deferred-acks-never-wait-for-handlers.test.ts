/**
 * Deferred mode answers in milliseconds whatever the handlers are doing, on real
 * PostgreSQL: with every pool connection held by a lane whose handler is running, a new event,
 * an ordered one and a redelivery of an event being applied are all acknowledged at once (on
 * the acknowledgements' own connections, `ackPoolSize`; the redelivery from the stored row,
 * without waiting for the worker's lock), and everything is then applied once. And the defaults
 * that make it so.
 */
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createInbox, type Inbox, InboxOptionsError } from '../src/index.js';
import { postgresUrl, uniqueName } from './support/databases.js';

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const inboxes: Inbox[] = [];
const schemas: string[] = [];

afterEach(async () => {
  await Promise.all(inboxes.splice(0).map((i) => i.close()));
  if (!postgresUrl || schemas.length === 0) return;
  const client = new pg.Client({ connectionString: postgresUrl });
  await client.connect();
  for (const schema of schemas.splice(0)) await client.query(`drop schema if exists "${schema}" cascade`);
  await client.end();
});

describe('the defaults', () => {
  it('deferred mode on a connection string: 2 connections for acknowledgements, a lane per pool connection', () => {
    const inbox = createInbox({
      db: 'postgres://nowhere.invalid/x',
      mode: 'deferred',
      poolSize: 6,
      logger: false,
      migrate: false,
      handle: () => null,
    });
    inboxes.push(inbox);
    expect(inbox.options).toMatchObject({ ackPoolSize: 2, workers: 6 });
  });

  it('acknowledgements share the pool where the inbox cannot open connections (a Kysely instance): half the pool for lanes', () => {
    const kysely = new Kysely<any>({
      dialect: new PostgresDialect({
        pool: new pg.Pool({ connectionString: 'postgres://nowhere.invalid/x' }),
      }),
    });
    const inbox = createInbox({
      db: kysely,
      mode: 'deferred',
      logger: false,
      migrate: false,
      handle: () => null,
    });
    inboxes.push(inbox);
    expect(inbox.options).toMatchObject({ ackPoolSize: 0, workers: 5 });
  });

  it('an ackPoolSize out of range is refused, naming it', () => {
    expect(() =>
      createInbox({
        db: 'postgres://nowhere.invalid/x',
        mode: 'deferred',
        ackPoolSize: -1,
        handle: () => null,
      }),
    ).toThrow(expect.objectContaining({ name: InboxOptionsError.name, option: 'ackPoolSize' }));
  });
});

describe.runIf(postgresUrl)('with every pool connection in a running handler (PostgreSQL)', () => {
  it('new, ordered and redelivered events are acknowledged at once, then applied once', async () => {
    const schema = uniqueName('wi');
    schemas.push(schema);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const running = new Set<string>();
    const applied: string[] = [];
    const inbox = createInbox({
      db: postgresUrl!,
      schema,
      mode: 'deferred',
      poolSize: 2,
      workerBatchSize: 1,
      poolWaitTimeoutMs: 2000,
      logger: quiet,
      handle: async (event) => {
        running.add(event.id);
        await gate;
        applied.push(event.id);
        return { ok: event.id };
      },
    });
    inboxes.push(inbox);
    expect(inbox.options).toMatchObject({ workers: 2, ackPoolSize: 2 });
    const deliver = (id: string, headers: Record<string, string> = {}) =>
      inbox.receive({
        headers: { 'content-type': 'application/json', 'idempotency-key': id, ...headers },
        rawBody: Buffer.from('{}'),
      });
    // Two events take both lanes, and so both pool connections, until the gate opens.
    expect((await deliver('a')).status).toBe(202);
    expect((await deliver('b')).status).toBe(202);
    await vi.waitFor(() => expect(running.size).toBe(2), { timeout: 10_000, interval: 5 });

    // Each answered well within the pool wait (2 s, then 503) it would otherwise queue for.
    const timed = async (id: string, headers?: Record<string, string>) => {
      const began = performance.now();
      const outcome = await deliver(id, headers);
      return { status: outcome.status, kind: outcome.kind, ms: performance.now() - began };
    };
    const answers = [
      await timed('c'),
      await timed('a'), // a redelivery of an event a worker is applying
      await timed('k-1', { 'x-key': 'k', 'x-seq': '1' }),
      await timed('k-2', { 'x-key': 'k', 'x-seq': '2' }),
    ];
    expect(answers.map((a) => [a.status, a.kind])).toEqual([
      [202, 'pending'],
      [202, 'pending'],
      [202, 'pending'],
      [202, 'held'],
    ]);
    for (const a of answers) expect(a.ms).toBeLessThan(1000);
    expect(applied).toEqual([]);

    release();
    await vi.waitFor(
      async () => {
        for (const id of ['a', 'b', 'c', 'k-1', 'k-2'])
          expect((await inbox.event(id))?.status, id).toBe('processed');
      },
      { timeout: 20_000, interval: 20 },
    );
    expect([...applied].sort()).toEqual(['a', 'b', 'c', 'k-1', 'k-2']);
    expect(applied.indexOf('k-1')).toBeLessThan(applied.indexOf('k-2'));
    // Applied now: a redelivery is 200 with the stored result.
    expect((await deliver('a')).body).toMatchObject({ status: 'duplicate', result: { ok: 'a' } });
  });
});
