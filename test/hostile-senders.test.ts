/**
 * Hostile and sloppy senders, over real sockets, through each framework adapter (the ledger
 * example's apps): headers sent twice, keys that are not ASCII (or not text), a new id at a seq
 * its key already applied, and a handler that rejects an event for good. Each case is what a
 * sender sees (status, problem+json) and what the inbox and the ledger hold afterwards.
 *
 * The requests go through node:http, not fetch: fetch joins a repeated header into one line,
 * and header values here are raw bytes (a latin1 string, one character per byte, as Node sends
 * and receives them).
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { request } from 'node:http';
import { connect } from 'node:net';
import { sql } from 'kysely';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FRAMEWORKS, type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';

const target = targets.at(-1)!;
const uid = (p: string) => `${p}_${randomBytes(6).toString('hex')}`;
/** A header value carrying these UTF-8 bytes, as Node writes and reads header values. */
const utf8 = (text: string) => Buffer.from(text, 'utf8').toString('latin1');

interface Reply {
  status: number;
  contentType: string | undefined;
  json: any;
}

function send(url: string, headers: Record<string, string | string[]>, body: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}/webhooks`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({
            status: res.statusCode ?? 0,
            contentType: res.headers['content-type'],
            json: text ? JSON.parse(text) : undefined,
          });
        });
      },
    );
    req.on('error', reject);
    // A Buffer, not a string: Node writes a string body and the head together in the body's
    // encoding (UTF-8), which would re-encode the header bytes.
    req.end(Buffer.from(body));
  });
}

function expectProblem(r: Reply, status: number, field: string) {
  expect(r.status, JSON.stringify(r.json)).toBe(status);
  expect(r.contentType).toMatch(/^application\/problem\+json/);
  expect(r.json).toMatchObject({ status, field });
  expect(JSON.stringify(r.json)).not.toMatch(/at .*\.ts|select |insert /i);
}

let db: TargetDb;
beforeAll(async () => {
  db = await target.open();
});
afterAll(async () => {
  await db?.close();
});

describe.each(FRAMEWORKS)('hostile senders through %s', (framework) => {
  let app: LedgerServer;
  let registry: Registry;
  const schema = uniqueName('wi');
  const ledgerSchema = uniqueName('app');
  const body = (amount: unknown) => JSON.stringify({ amount });
  const balance = async (key: string) => (await app.ledger.account(await app.inbox.kysely(), key)).balance;
  const counter = async (name: string, labels: Record<string, string>) => {
    const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === name);
    const value = (metric?.values as { labels: Record<string, string>; value: number }[] | undefined)?.find(
      (v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l),
    );
    return value?.value ?? 0;
  };

  beforeAll(async () => {
    registry = new Registry();
    app = await startLedger({
      framework,
      ledgerSchema,
      inbox: { db: db.db, schema, sweepIntervalMs: 0, duplicateCacheSize: 0, metrics: { registry } },
    });
  });
  afterAll(async () => {
    if (!app) return;
    const k = await app.inbox.kysely();
    await sql`drop schema if exists ${sql.id(schema)}, ${sql.id(ledgerSchema)} cascade`.execute(k);
    await app.close();
  });

  describe('a header sent twice is 400 naming it, never a new event', () => {
    test.each([
      [
        'idempotency-key',
        (id: string, key: string) => ({ 'idempotency-key': [id, id], 'x-key': key, 'x-seq': '1' }),
      ],
      ['x-key', (id: string, key: string) => ({ 'idempotency-key': id, 'x-key': [key, key], 'x-seq': '1' })],
      ['x-seq', (id: string, key: string) => ({ 'idempotency-key': id, 'x-key': key, 'x-seq': ['1', '1'] })],
    ])('%s', async (field, headers) => {
      const id = uid('evt');
      const key = uid('acct');
      expectProblem(await send(app.url, headers(id, key), body(3)), 400, field);
      expect(await app.inbox.event(id)).toBeUndefined();
      expect(await app.inbox.event(`${id}, ${id}`)).toBeUndefined();
      expect(await balance(key)).toBe(0);
    });

    test('in any letter case', async () => {
      // Written by hand: Node's client merges header names that differ only in case.
      const id = uid('evt');
      const payload = body(1);
      const { port } = new URL(app.url);
      const socket = connect(Number(port), '127.0.0.1');
      socket.end(
        `POST /webhooks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
          `Idempotency-Key: ${id}\r\nidempotency-KEY: ${id}\r\nContent-Length: ${payload.length}\r\n` +
          `Connection: close\r\n\r\n${payload}`,
      );
      const chunks: Buffer[] = [];
      for await (const chunk of socket) chunks.push(chunk as Buffer);
      const response = Buffer.concat(chunks).toString('utf8');
      expect(response).toMatch(/^HTTP\/1\.1 400 /);
      expect(response).toMatch(/"field":"idempotency-key"/);
      expect(await app.inbox.event(id)).toBeUndefined();
    });
  });

  describe('keys are text', () => {
    test.each([
      ['Cyrillic', () => `счёт-${uid('к')}`],
      ['emoji', () => `💳🏦-${uid('e')}`],
    ])('a %s key is applied and stored as the characters sent', async (_name, make) => {
      const key = make();
      const r = await send(
        app.url,
        { 'idempotency-key': uid('evt'), 'x-key': utf8(key), 'x-seq': '1' },
        body(7),
      );
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(await balance(key)).toBe(7);
      expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 2 });
    });

    test('the length limit counts characters: 255 emoji pass, 256 are 400', async () => {
      const id = uid('evt');
      const ok = await send(
        app.url,
        { 'idempotency-key': id, 'x-key': utf8('💳'.repeat(255)), 'x-seq': '1' },
        body(1),
      );
      expect(ok.status, JSON.stringify(ok.json)).toBe(200);
      const long = await send(
        app.url,
        { 'idempotency-key': uid('evt'), 'x-key': utf8('💳'.repeat(256)), 'x-seq': '1' },
        body(1),
      );
      expectProblem(long, 400, 'x-key');
    });

    test.each([
      ['invalid UTF-8', '\xff\xfeacct'],
      ['a C1 control character (U+0085)', utf8('acct\u0085x')],
      ['a C1 escape (U+009B, CSI)', utf8('acct\u009b31m')],
    ])('%s is 400 naming the header, nothing stored', async (_name, value) => {
      const id = uid('evt');
      expectProblem(
        await send(app.url, { 'idempotency-key': id, 'x-key': value, 'x-seq': '1' }, body(1)),
        400,
        'x-key',
      );
      expect(await app.inbox.event(id)).toBeUndefined();
    });
  });

  test('a new id at a seq its key already applied is 422 and counted, not a duplicate', async () => {
    const key = uid('acct');
    const first = uid('evt');
    expect(
      (await send(app.url, { 'idempotency-key': first, 'x-key': key, 'x-seq': '1' }, body(5))).status,
    ).toBe(200);
    const before = await counter('webhook_inbox_seq_conflicts_total', { reason: 'applied' });
    // A sender that restarted its counter: a different event, at seq 1 again.
    const other = uid('evt');
    const r = await send(app.url, { 'idempotency-key': other, 'x-key': key, 'x-seq': '1' }, body(9));
    expectProblem(r, 422, 'x-seq');
    expect(r.json.detail).toContain('already applied');
    expect(await counter('webhook_inbox_seq_conflicts_total', { reason: 'applied' })).toBe(before + 1);
    expect(await app.inbox.event(other)).toBeUndefined();
    expect(await balance(key)).toBe(5);
    // The event itself, delivered again, is still a duplicate.
    const again = await send(app.url, { 'idempotency-key': first, 'x-key': key, 'x-seq': '1' }, body(5));
    expect(again.json).toMatchObject({ status: 'duplicate', id: first });
  });

  describe('RejectEvent: dead-lettered at once, 422, never retried', () => {
    test('an unordered event', async () => {
      const id = uid('evt');
      const before = await counter('webhook_inbox_dead_letters_total', { reason: 'rejected' });
      const r = await send(app.url, { 'idempotency-key': id }, body('ten'));
      // A rejection names no request field: the handler refused the event, not a header.
      expect(r.status, JSON.stringify(r.json)).toBe(422);
      expect(r.contentType).toMatch(/^application\/problem\+json/);
      expect(r.json).toMatchObject({ status: 422, type: expect.stringMatching(/#rejected$/), id });
      expect(r.json).not.toHaveProperty('field');
      expect(JSON.stringify(r.json)).not.toContain('must be an integer');
      expect(await app.inbox.event(id)).toMatchObject({
        status: 'dead',
        deadReason: 'rejected',
        attempts: 1,
      });
      expect(await counter('webhook_inbox_dead_letters_total', { reason: 'rejected' })).toBe(before + 1);
      expect((await app.inbox.deadLetters({ reason: 'rejected' })).map((e) => e.id)).toContain(id);
      // Delivered again: the same answer, and the handler does not run again.
      const runs = app.ledger.runs;
      expect((await send(app.url, { 'idempotency-key': id }, body('ten'))).status).toBe(422);
      expect(app.ledger.runs).toBe(runs);
    });

    test('an ordered event blocks its key (onPoison: block), later seqs wait', async () => {
      const key = uid('acct');
      const r = await send(app.url, { 'idempotency-key': uid('evt'), 'x-key': key, 'x-seq': '1' }, body(1.5));
      expect(r.status).toBe(422);
      expect(await app.inbox.keyState(key)).toMatchObject({ state: 'blocked', blockedSeq: 1 });
      const next = await send(
        app.url,
        { 'idempotency-key': uid('evt'), 'x-key': key, 'x-seq': '2' },
        body(2),
      );
      expect(next.json).toMatchObject({ status: 'held' });
      expect(await balance(key)).toBe(0);
    });
  });

  describe('slow senders and concurrent duplicates', () => {
    let slow: LedgerServer;
    let gate: { id: string; entered: () => void; release: Promise<void> } | undefined;
    const slowSchemas = { inbox: uniqueName('wi'), ledger: uniqueName('app') };
    beforeAll(async () => {
      slow = await startLedger({
        framework,
        ledgerSchema: slowSchemas.ledger,
        inbox: {
          db: db.db,
          schema: slowSchemas.inbox,
          sweepIntervalMs: 0,
          maxInFlight: 1,
          bodyTimeoutMs: 300,
          onInFlight: 'reject',
          // Long enough that waiting for the lock could not pass for an answer at once.
          lockTimeoutMs: 60_000,
        },
        wrapHandler: (handle) => async (event, ctx) => {
          if (gate && event.id === gate.id) {
            gate.entered();
            await gate.release;
          }
          return handle(event, ctx);
        },
      });
    });
    afterAll(async () => {
      if (!slow) return;
      const k = await slow.inbox.kysely();
      await sql`drop schema if exists ${sql.id(slowSchemas.inbox)}, ${sql.id(slowSchemas.ledger)} cascade`.execute(
        k,
      );
      await slow.close();
    });

    /** Opens a delivery by hand that declares `declared` bytes and sends only `sent` of them. */
    async function trickle(declared: number, sent: string, headers = '') {
      const { port } = new URL(slow.url);
      const socket = connect(Number(port), '127.0.0.1');
      await once(socket, 'connect');
      const id = uid('slow');
      socket.write(
        `POST /webhooks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${headers}` +
          `Idempotency-Key: ${id}\r\nContent-Length: ${declared}\r\n\r\n${sent}`,
      );
      const chunks: Buffer[] = [];
      socket.on('data', (c: Buffer) => chunks.push(c));
      const closed = once(socket, 'close').then(() => Buffer.concat(chunks).toString('utf8'));
      return { closed, socket, id };
    }

    test('a sender that sends headers and no body holds no in-flight slot, and gets 408', async () => {
      const stalled = await trickle(40, '');
      // maxInFlight is 1: were the stalled request counted, this would be 503.
      const key = uid('acct');
      const r = await send(slow.url, { 'idempotency-key': uid('evt'), 'x-key': key, 'x-seq': '1' }, body(2));
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      const response = await stalled.closed;
      expect(response).toMatch(/^HTTP\/1\.1 408 /);
      expect(response).toMatch(/connection: close/i);
      expect(response).toMatch(/"field":"body"/);
    });

    test('a body trickled past bodyTimeoutMs is 408, nothing stored', async () => {
      // What arrived is a whole JSON value of an ordered event: were it taken for the body, it
      // would be applied, or held ahead of its key's cursor.
      const key = uid('acct');
      const stalled = await trickle(40, '{"amount":7}', `X-Key: ${key}\r\nX-Seq: 2\r\n`);
      const response = await stalled.closed;
      expect(await slow.inbox.event(stalled.id)).toBeUndefined();
      expect(await slow.inbox.keyState(key)).toBeUndefined();
      expect((await slow.ledger.account(await slow.inbox.kysely(), key)).balance).toBe(0);
      expect(response).toMatch(/^HTTP\/1\.1 408 /);
      expect(response).toMatch(/application\/problem\+json/);
      expect(response).toMatch(/"title":"Request timeout"/);
    });

    // PGlite has one session: the duplicate waits for the session the first delivery's
    // transaction holds, not for its row, so nothing can answer it at once (as the other 409
    // in-flight cases, it runs on PostgreSQL only; without a server this file runs on PGlite).
    test.skipIf(target.name === 'pglite')(
      "onInFlight 'reject': a duplicate of a delivery still in its handler is 409 at once",
      async () => {
        const id = uid('evt');
        let entered!: () => void;
        const inHandler = new Promise<void>((resolve) => {
          entered = resolve;
        });
        let release!: () => void;
        gate = { id, entered, release: new Promise<void>((resolve) => (release = resolve)) };
        const first = send(slow.url, { 'idempotency-key': id }, body(1));
        await inHandler;
        // maxInFlight is 1 and taken by the first delivery: raise it for this one request.
        const second = await slowSecond(id);
        expect(second.status, JSON.stringify(second.json)).toBe(409);
        expect(second.json).toMatchObject({ status: 409 });
        release();
        expect((await first).json).toMatchObject({ status: 'processed', id });
        expect((await send(slow.url, { 'idempotency-key': id }, body(1))).json).toMatchObject({
          status: 'duplicate',
        });
      },
    );

    /** The duplicate goes to a second app on the same tables, so that maxInFlight 1 does not shed it. */
    async function slowSecond(id: string): Promise<Reply> {
      const other = await startLedger({
        framework,
        ledgerSchema: slowSchemas.ledger,
        inbox: {
          db: db.another(),
          schema: slowSchemas.inbox,
          sweepIntervalMs: 0,
          onInFlight: 'reject',
          lockTimeoutMs: 60_000,
        },
      });
      try {
        return await send(other.url, { 'idempotency-key': id }, body(1));
      } finally {
        await other.close();
      }
    }
  });
});
