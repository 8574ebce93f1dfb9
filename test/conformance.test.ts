/**
 * One table of cases (docs/outcomes.md), run against every framework adapter, on every target,
 * over real sockets. A case added to `cases` runs for Express 5, Express 4, Koa, Fastify, Hono
 * and the plain fetch handler alike.
 *
 * The apps are the ledger example's (examples/ledger/app-*.ts), so the side effects are the
 * ledger's rows, read back over HTTP (`GET /accounts/:key`) as a user would.
 *
 * Dimensions: `targets` × `frameworks` × `modes`. A mode is a name and the inbox options
 * that turn it on; `serve()` builds one app from a framework, a target and inbox options.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Account } from '../examples/ledger/ledger.js';
import { ALL_FRAMEWORKS, type Framework, type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { type Handler, hmacSignature, type InboxOptions, type ResponseShape } from '../src/index.js';
import { type Target, type TargetDb, targets, uniqueName } from './support/databases.js';

/**
 * Inline: the handler runs in the request (200 processed). Deferred: the request stores the
 * event as pending (202) and a worker applies it; retries and ordered keys are picked up by the
 * sweeper and the poll, quickly here. Cases say what differs with `app.mode`.
 */
interface Mode {
  readonly name: 'inline' | 'deferred';
  readonly options: Partial<InboxOptions>;
}
const modes: Mode[] = [
  { name: 'inline', options: {} },
  {
    name: 'deferred',
    options: {
      mode: 'deferred',
      workers: 2,
      sweepIntervalMs: 50,
      pollIntervalMs: 50,
      retryBaseMs: 1,
      retryCapMs: 1,
    },
  },
];

/** Every conformance delivery is signed (generic HMAC, GitHub-style); see the 401 cases. */
const SECRET = 'conformance-secret';
const sign = (body: string) => `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`;

/** Options every conformance app shares: small limits so that each outcome is cheap to reach. */
const BASE_OPTIONS = {
  verify: hmacSignature({ header: 'x-signature', prefix: 'sha256=', secret: SECRET }),
  maxBodyBytes: 1024,
  maxAttempts: 2,
  maxHeldPerKey: 1,
  lockTimeoutMs: 300,
  sweepIntervalMs: 0,
} satisfies Partial<InboxOptions>;

/** A handler gate: holds one event's handler (inside its transaction) until released. */
interface Gate {
  entered: Promise<void>;
  release(): void;
}

interface App extends LedgerServer {
  readonly framework: Framework;
  readonly target: Target['name'];
  readonly mode: Mode['name'];
  /**
   * Waits until event `id` is no longer waiting (applied or dead-lettered). Inline mode has
   * nothing to wait for; deferred mode waits for the workers (bounded).
   */
  settle(id: string): Promise<void>;
  /** Makes the handler of event `id` wait, inside its transaction, until `release()`. */
  hold(id: string): Gate;
  /** POSTs a signed delivery; a header given as null is left out. */
  post(headers: Record<string, string | null>, body?: string): Promise<Reply>;
  account(key: string): Promise<Account>;
  failNext(key: string, times: number): Promise<void>;
}

interface Reply {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

/** Builds one app: a framework's ledger server over a target, with these inbox options. */
async function serve(
  framework: Framework,
  target: { name: Target['name']; db: TargetDb },
  mode: Mode,
  options: Partial<InboxOptions>,
): Promise<App> {
  // Apps on one target share its database (a PGlite instance is slow to start), each in
  // schemas of its own.
  const schema = uniqueName('wi');
  const ledgerSchema = uniqueName('app');
  const gates = new Map<string, { enter(): void; released: Promise<void> }>();
  const wrapHandler =
    (handle: Handler): Handler =>
    async (event, context) => {
      const gate = gates.get(event.id);
      if (gate) {
        gate.enter();
        await gate.released;
      }
      return handle(event, context);
    };
  const server = await startLedger({
    testHooks: true,
    framework,
    ledgerSchema,
    inbox: { ...options, db: target.db.db, schema },
    wrapHandler,
  });
  const call = async (path: string, init: RequestInit): Promise<Reply> => {
    const res = await fetch(server.url + path, init);
    const text = await res.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {}
    return { status: res.status, headers: res.headers, text, json };
  };
  return {
    framework,
    target: target.name,
    mode: mode.name,
    url: server.url,
    inbox: server.inbox,
    ledger: server.ledger,
    server: server.server,
    shutdown: () => server.shutdown(),
    close: async () => {
      await sql`drop schema if exists ${sql.id(schema)}, ${sql.id(ledgerSchema)} cascade`.execute(
        await server.inbox.kysely(),
      );
      await server.close();
    },
    async settle(id: string) {
      const deadline = Date.now() + 15_000;
      for (;;) {
        await server.inbox.idle();
        const status = (await server.inbox.event(id))?.status;
        if (status !== 'pending' && status !== 'held') return;
        if (Date.now() > deadline) throw new Error(`event ${id} still ${status}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    hold(id: string): Gate {
      let enter!: () => void;
      let release!: () => void;
      const entered = new Promise<void>((r) => (enter = r));
      const released = new Promise<void>((r) => (release = r));
      gates.set(id, { enter, released });
      return { entered, release };
    },
    post: (headers: Record<string, string | null>, body = '{"amount":1}') => {
      const all = { 'content-type': 'application/json', 'x-signature': sign(body), ...headers };
      return call('/webhooks', {
        method: 'POST',
        headers: Object.fromEntries(Object.entries(all).filter(([, v]) => v !== null)) as Record<
          string,
          string
        >,
        body,
      });
    },
    account: async (key: string) =>
      (await call(`/accounts/${encodeURIComponent(key)}`, { method: 'GET' })).json as Account,
    failNext: async (key: string, times: number) => {
      const r = await call('/fail-next', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ key, times }),
      });
      expect(r.status).toBe(200);
    },
  };
}

const uid = (prefix: string) => `${prefix}-${randomBytes(6).toString('hex')}`;

/** One ordered event on a fresh key: its headers, and the key to read the account back. */
function freshEvent(seq = 1) {
  const key = uid('acct');
  return {
    key,
    id: uid('evt'),
    headers: (id: string, s = seq) => ({ 'idempotency-key': id, 'x-key': key, 'x-seq': String(s) }),
  };
}

function expectJson(r: Reply, status: number) {
  expect(r.status, r.text).toBe(status);
  expect(r.headers.get('content-type')).toMatch(/^application\/json/);
}

/**
 * The acknowledgement of a delivery that applies the event: inline, 200 processed with the
 * handler's result; deferred, 202 pending, then (after `settle`) applied by a worker.
 */
async function expectApplied(app: App, r: Reply, id: string, result: unknown) {
  if (app.mode === 'inline') {
    expectJson(r, 200);
    expect(r.headers.get('idempotent-replayed')).toBeNull();
    expect(r.json).toEqual({ status: 'processed', id, result });
  } else {
    expectJson(r, 202);
    expect(r.json).toEqual({ status: 'pending', id });
    await app.settle(id);
  }
}

function expectProblem(r: Reply, status: number, field?: string) {
  expect(r.status, r.text).toBe(status);
  expect(r.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(r.json).toMatchObject({ status, type: expect.any(String), title: expect.any(String) });
  expect(r.json.detail).toEqual(expect.any(String));
  if (field !== undefined) expect(r.json.field).toBe(field);
  // Never internals: no stack, no SQL, no handler message.
  expect(r.text).not.toMatch(/\bat .*\.(ts|js):\d+|select |insert |failing on purpose|Error:/i);
}

async function expectNothingStored(app: App, id: string, key: string) {
  expect(await app.inbox.event(id)).toBeUndefined();
  expect(await app.account(key)).toEqual({ key, balance: 0, entries: [] });
}

interface Case {
  readonly name: string;
  /** Targets it cannot run on, and why (said in the test name). */
  readonly skip?: (app: App) => string | false;
  run(app: App): Promise<void>;
}

const MALFORMED_SEQ = ['abc', '0', '-1', '1.5', '1e3', '9007199254740993', ''];

const cases: Case[] = [
  {
    name: 'processed: first delivery runs the handler once and answers 200 with its result',
    async run(app) {
      const e = freshEvent();
      const r = await app.post(e.headers(e.id), '{"amount":5}');
      await expectApplied(app, r, e.id, { balance: 5 });
      expect(await app.account(e.key)).toEqual({
        key: e.key,
        balance: 5,
        entries: [{ id: e.id, seq: 1, amount: 5 }],
      });
      expect((await app.inbox.event(e.id))?.status).toBe('processed');
    },
  },
  {
    name: 'duplicate: a second copy is replayed with Idempotent-Replayed and no second side effect',
    async run(app) {
      const e = freshEvent();
      await expectApplied(app, await app.post(e.headers(e.id), '{"amount":7}'), e.id, { balance: 7 });
      const r = await app.post(e.headers(e.id), '{"amount":7}');
      expectJson(r, 200);
      expect(r.headers.get('idempotent-replayed')).toBe('true');
      expect(r.json).toEqual({ status: 'duplicate', id: e.id, result: { balance: 7 } });
      expect((await app.account(e.key)).entries).toEqual([{ id: e.id, seq: 1, amount: 7 }]);
    },
  },
  {
    name: 'in-flight: a copy arriving while the first is still in its handler gets 409 + Retry-After (deferred: 202, a worker has it)',
    // PGlite is one session: transactions are serialised, so the copy waits for the first
    // delivery's transaction instead of contending for its row, and never times out.
    skip: (app) => app.target === 'pglite' && 'PGlite is one session: a concurrent copy waits instead',
    async run(app) {
      const e = freshEvent();
      const gate = app.hold(e.id);
      const first = app.post(e.headers(e.id), '{"amount":3}');
      await gate.entered;
      const r = await app.post(e.headers(e.id), '{"amount":3}');
      gate.release();
      if (app.mode === 'deferred') {
        // A worker holds the event: the copy's claim does not wait for it while holding the key
        // (ARCHITECTURE.md, "Locks") and answers from the committed row. It is stored and being
        // applied, so 202 pending is the truth, and the sender may stop.
        expectJson(r, 202);
        expect(r.json.status).toBe('pending');
      } else {
        expectProblem(r, 409);
        expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      }
      // Deferred: the first was acknowledged (202) before its handler ran in a worker.
      expectJson(await first, app.mode === 'inline' ? 200 : 202);
      await app.settle(e.id);
      expect((await app.account(e.key)).entries).toEqual([{ id: e.id, seq: 1, amount: 3 }]);
    },
  },
  {
    name: 'unauthorized: a wrong signature is 401 naming the header; nothing stored, no handler run',
    async run(app) {
      const e = freshEvent();
      const forged = `sha256=${createHmac('sha256', 'not-the-secret').update('{"amount":1}').digest('hex')}`;
      expectProblem(await app.post({ ...e.headers(e.id), 'x-signature': forged }), 401, 'x-signature');
      await expectNothingStored(app, e.id, e.key);
      expect(await app.inbox.keyState(e.key)).toBeUndefined();
    },
  },
  {
    name: 'unauthorized: a missing signature is 401 even when the headers are also invalid',
    async run(app) {
      const e = freshEvent();
      const r = await app.post({ ...e.headers(e.id), 'x-seq': 'abc', 'x-signature': null });
      expectProblem(r, 401, 'x-signature');
      await expectNothingStored(app, e.id, e.key);
    },
  },
  {
    name: 'mismatch: the same id with a different body is 422 and changes nothing',
    async run(app) {
      const e = freshEvent();
      await expectApplied(app, await app.post(e.headers(e.id), '{"amount":2}'), e.id, { balance: 2 });
      const r = await app.post(e.headers(e.id), '{"amount":200}');
      expectProblem(r, 422, 'body');
      expect(await app.account(e.key)).toMatchObject({ balance: 2, entries: [{ id: e.id, amount: 2 }] });
    },
  },
  {
    name: 'invalid: a missing Idempotency-Key is 400 naming it',
    async run(app) {
      const e = freshEvent();
      const { 'idempotency-key': _, ...headers } = e.headers(e.id);
      expectProblem(await app.post(headers), 400, 'idempotency-key');
      expect(await app.account(e.key)).toEqual({ key: e.key, balance: 0, entries: [] });
    },
  },
  {
    name: 'invalid: an empty X-Key is 400 naming it',
    async run(app) {
      const e = freshEvent();
      expectProblem(await app.post({ ...e.headers(e.id), 'x-key': '' }), 400, 'x-key');
      expect(await app.inbox.event(e.id)).toBeUndefined();
    },
  },
  ...MALFORMED_SEQ.map(
    (value): Case => ({
      name: `invalid: X-Seq ${JSON.stringify(value)} is 400 naming it`,
      async run(app) {
        const e = freshEvent();
        expectProblem(await app.post({ ...e.headers(e.id), 'x-seq': value }), 400, 'x-seq');
        await expectNothingStored(app, e.id, e.key);
      },
    }),
  ),
  {
    name: 'invalid: a body over maxBodyBytes is 413 and nothing is stored',
    async run(app) {
      const e = freshEvent();
      const body = JSON.stringify({ amount: 1, pad: 'x'.repeat(BASE_OPTIONS.maxBodyBytes) });
      expectProblem(await app.post(e.headers(e.id), body), 413, 'body');
      await expectNothingStored(app, e.id, e.key);
    },
  },
  {
    name: 'invalid: broken JSON is 400 naming the body, and nothing is stored',
    async run(app) {
      const e = freshEvent();
      expectProblem(await app.post(e.headers(e.id), '{"amount":'), 400, 'body');
      await expectNothingStored(app, e.id, e.key);
    },
  },
  {
    name: 'held: an event ahead of its key is 202, buffered, and applied once the gap fills',
    async run(app) {
      const e = freshEvent();
      const second = uid('evt');
      const r = await app.post(e.headers(second, 2), '{"amount":20}');
      expectJson(r, 202);
      expect(r.json).toEqual({ status: 'held', id: second, key: e.key, seq: 2, expected: 1 });
      expect(await app.account(e.key)).toEqual({ key: e.key, balance: 0, entries: [] });
      expect((await app.inbox.held(e.key)).map((h) => h.seq)).toEqual([2]);
      await expectApplied(app, await app.post(e.headers(e.id, 1), '{"amount":1}'), e.id, { balance: 1 });
      await app.settle(second);
      expect((await app.account(e.key)).entries.map((x) => x.seq)).toEqual([1, 2]);
    },
  },
  {
    name: 'buffer-full: a key already holding maxHeldPerKey events answers 429 + Retry-After',
    async run(app) {
      const e = freshEvent();
      expectJson(await app.post(e.headers(uid('evt'), 2)), 202);
      const third = uid('evt');
      const r = await app.post(e.headers(third, 3));
      expectProblem(r, 429, 'x-key');
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(await app.inbox.event(third)).toBeUndefined();
      expect((await app.inbox.held(e.key)).map((h) => h.seq)).toEqual([2]);
    },
  },
  {
    name: 'failed: a handler that throws is 500 without internals, rolled back, and retryable',
    async run(app) {
      const e = freshEvent();
      await app.failNext(e.key, 1);
      const r = await app.post(e.headers(e.id), '{"amount":4}');
      if (app.mode === 'deferred') {
        // The sender saw 202; the worker's failed run was rolled back, counted, and retried.
        await expectApplied(app, r, e.id, null);
        expect((await app.account(e.key)).entries).toEqual([{ id: e.id, seq: 1, amount: 4 }]);
        expect(await app.inbox.event(e.id)).toMatchObject({ status: 'processed', attempts: 1 });
        return;
      }
      expectProblem(r, 500);
      expect(r.json.id).toBe(e.id);
      expect(await app.account(e.key)).toEqual({ key: e.key, balance: 0, entries: [] });
      const retry = await app.post(e.headers(e.id), '{"amount":4}');
      expectJson(retry, 200);
      expect(retry.json.status).toBe('processed');
      expect((await app.account(e.key)).entries).toEqual([{ id: e.id, seq: 1, amount: 4 }]);
    },
  },
  {
    name: 'dead-lettered: poison (maxAttempts failures) is 200 dead-lettered and parked',
    async run(app) {
      const e = freshEvent();
      await app.failNext(e.key, BASE_OPTIONS.maxAttempts);
      if (app.mode === 'deferred') {
        // Every attempt ran in a worker; the sender only saw 202, then 200 dead-lettered.
        expectJson(await app.post(e.headers(e.id), '{"amount":9}'), 202);
        await app.settle(e.id);
        const again = await app.post(e.headers(e.id), '{"amount":9}');
        expectJson(again, 200);
        expect(again.json).toEqual({ status: 'dead-lettered', id: e.id, reason: 'poison' });
        expect(await app.account(e.key)).toEqual({ key: e.key, balance: 0, entries: [] });
        const [parked] = await app.inbox.deadLetters({ key: e.key });
        expect(parked).toMatchObject({ id: e.id, status: 'dead', deadReason: 'poison', attempts: 2 });
        return;
      }
      for (let attempt = 1; attempt < BASE_OPTIONS.maxAttempts; attempt++) {
        expectProblem(await app.post(e.headers(e.id), '{"amount":9}'), 500);
      }
      const r = await app.post(e.headers(e.id), '{"amount":9}');
      expectJson(r, 200);
      expect(r.json).toEqual({ status: 'dead-lettered', id: e.id, reason: 'poison' });
      expect(await app.account(e.key)).toEqual({ key: e.key, balance: 0, entries: [] });
      const [dead] = await app.inbox.deadLetters({ key: e.key });
      expect(dead).toMatchObject({ id: e.id, status: 'dead', deadReason: 'poison' });
    },
  },
];

/**
 * Field sources: the same ledger app reading the id, key and seq from the body
 * (`fields: { id: '/idempotency_key', key: '/account', seq: '/sequence_id' }`), in every
 * adapter. Errors name the body field; the identity headers are ignored.
 */
const FIELD_OPTIONS = {
  fields: { id: '/idempotency_key', key: '/account', seq: '/sequence_id' },
} satisfies Partial<InboxOptions>;

function bodyEvent() {
  const account = uid('acct');
  return {
    account,
    body: (id: string, sequence_id: unknown, amount = 1) =>
      JSON.stringify({ idempotency_key: id, account, sequence_id, amount }),
  };
}

const fieldCases: Case[] = [
  {
    name: 'fields: id, key and seq from the body; a retry is a duplicate; identity headers are ignored',
    async run(app) {
      const e = bodyEvent();
      const id = uid('evt');
      // Headers that would be invalid (or another event) are not read when the body is the source.
      const noise = { 'idempotency-key': 'other', 'x-key': '', 'x-seq': 'abc' };
      await expectApplied(app, await app.post(noise, e.body(id, 1, 6)), id, { balance: 6 });
      const again = await app.post({}, e.body(id, 1, 6));
      expectJson(again, 200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(await app.account(e.account)).toEqual({
        key: e.account,
        balance: 6,
        entries: [{ id, seq: 1, amount: 6 }],
      });
    },
  },
  {
    name: 'fields: a body seq ahead of the key is held, and applied once the gap fills',
    async run(app) {
      const e = bodyEvent();
      const [first, second] = [uid('evt'), uid('evt')];
      const r = await app.post({}, e.body(second, 2, 20));
      expectJson(r, 202);
      expect(r.json).toEqual({ status: 'held', id: second, key: e.account, seq: 2, expected: 1 });
      await expectApplied(app, await app.post({}, e.body(first, 1, 1)), first, { balance: 1 });
      await app.settle(second);
      expect((await app.account(e.account)).entries.map((x) => x.seq)).toEqual([1, 2]);
    },
  },
  ...[0, -1, 1.5, '1e3', 2 ** 53, true].map(
    (value): Case => ({
      name: `fields: sequence_id ${JSON.stringify(value)} is 400 naming body /sequence_id`,
      async run(app) {
        const e = bodyEvent();
        const id = uid('evt');
        const r = await app.post({}, e.body(id, value));
        expectProblem(r, 400, 'body /sequence_id');
        expect(r.json.detail).toMatch(/^body \/sequence_id must be/);
        await expectNothingStored(app, id, e.account);
      },
    }),
  ),
  {
    name: 'fields: a missing body id is 400 naming body /idempotency_key; a key without seq names the seq',
    async run(app) {
      const e = bodyEvent();
      const r = await app.post({}, JSON.stringify({ account: e.account, sequence_id: 1, amount: 1 }));
      expectProblem(r, 400, 'body /idempotency_key');
      expect(r.json.detail).toBe('body /idempotency_key is required');
      const id = uid('evt');
      const noSeq = await app.post(
        {},
        JSON.stringify({ idempotency_key: id, account: e.account, amount: 1 }),
      );
      expectProblem(noSeq, 400, 'body /sequence_id');
      await expectNothingStored(app, id, e.account);
    },
  },
];

/**
 * The `respond` hook: what the sender receives is shaped, in every adapter, the same way. The
 * ingest contract's answers (202 buffered or processed), Slack's url_verification challenge as
 * text, and a failure that keeps a failure status whatever the hook asks.
 */
const RESPOND_OPTIONS = {
  respond(outcome, event): ResponseShape | undefined {
    const body = event?.body as { type?: string; challenge?: string } | undefined;
    if (body?.type === 'url_verification') {
      return { status: 200, headers: { 'content-type': 'text/plain' }, body: String(body.challenge) };
    }
    switch (outcome.kind) {
      case 'held':
      case 'pending':
        return { status: 202, body: { status: 'buffered' } };
      case 'processed':
        return { status: 202, body: { status: 'processed' } };
      case 'failed':
        return { headers: { 'retry-after': '7', 'x-hook': 'failed' }, body: { status: 'retry' } };
      case 'invalid':
        // Refused: nothing was stored, a 2xx would make the sender drop the event.
        return { status: 200, body: { status: 'ok' } };
      default:
        return undefined;
    }
  },
} satisfies Partial<InboxOptions>;

const respondCases: Case[] = [
  {
    name: 'respond: held is 202 buffered, processed 202 processed; a duplicate keeps its default answer',
    async run(app) {
      const e = freshEvent();
      const second = uid('evt');
      const held = await app.post(e.headers(second, 2), '{"amount":2}');
      expectJson(held, 202);
      expect(held.json).toEqual({ status: 'buffered' });
      const first = await app.post(e.headers(e.id, 1), '{"amount":1}');
      expectJson(first, 202);
      expect(first.json).toEqual({ status: 'processed' });
      const again = await app.post(e.headers(e.id, 1), '{"amount":1}');
      expectJson(again, 200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      await app.settle(second);
      expect((await app.account(e.key)).entries.map((x) => x.seq)).toEqual([1, 2]);
    },
  },
  {
    name: "respond: Slack's url_verification is answered 200 with its challenge as text/plain",
    async run(app) {
      const challenge = uid('challenge');
      const body = JSON.stringify({ token: 't', challenge, type: 'url_verification' });
      const r = await app.post({ 'idempotency-key': `url_verification:${challenge}` }, body);
      expect(r.status, r.text).toBe(200);
      expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
      expect(r.text).toBe(challenge);
    },
  },
  {
    name: 'respond: a failure keeps its status with the body and headers the hook gives; a 2xx for a 400 is refused',
    async run(app) {
      const e = freshEvent();
      await app.failNext(e.key, 1);
      const failed = await app.post(e.headers(e.id), '{"amount":4}');
      expectJson(failed, 500);
      expect(failed.json).toEqual({ status: 'retry' });
      expect(failed.headers.get('retry-after')).toBe('7');
      expect(failed.headers.get('x-hook')).toBe('failed');
      expect(failed.text).not.toMatch(/failing on purpose/);
      const { 'idempotency-key': _, ...noId } = e.headers(e.id);
      expectProblem(await app.post(noId), 400, 'idempotency-key');
    },
  },
];

/**
 * `bodySchema` as a JSON Schema (Ajv): checked at the door in every adapter; a failing body is
 * 422 naming its path, nothing stored, the handler not run.
 */
const JSON_SCHEMA_OPTIONS = {
  bodySchema: {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    required: ['amount'],
    properties: { amount: { type: 'integer', minimum: 1 }, note: { type: 'string', maxLength: 20 } },
  },
} satisfies Partial<InboxOptions>;

const jsonSchemaCases: Case[] = [
  {
    name: 'json schema: a body that passes is applied once',
    async run(app) {
      const e = freshEvent();
      await expectApplied(app, await app.post(e.headers(e.id), '{"amount":3,"note":"ok"}'), e.id, {
        balance: 3,
      });
      expect((await app.account(e.key)).entries).toEqual([{ id: e.id, seq: 1, amount: 3 }]);
    },
  },
  ...[
    ['{"amount":0}', 'body /amount', 'body /amount: must be >= 1'],
    ['{"amount":"3"}', 'body /amount', 'body /amount: must be integer'],
    ['{"note":"x"}', 'body /amount', 'body /amount: is required'],
    [
      '{"amount":1,"note":"far too long for the schema"}',
      'body /note',
      'body /note: must NOT have more than 20 characters',
    ],
  ].map(
    ([body, field, detail]): Case => ({
      name: `json schema: ${body} is 422 naming ${field}; nothing stored, no handler run`,
      async run(app) {
        const e = freshEvent();
        const r = await app.post(e.headers(e.id), body);
        expectProblem(r, 422, field);
        expect(r.json.detail).toBe(detail);
        await expectNothingStored(app, e.id, e.key);
        expect(await app.inbox.keyState(e.key)).toBeUndefined();
      },
    }),
  ),
];

describe.each(targets)('conformance on $name', (target) => {
  const shared = { name: target.name, db: undefined as unknown as TargetDb };
  beforeAll(async () => {
    shared.db = await target.open();
  });
  afterAll(async () => {
    await shared.db?.close();
  });
  describe.each(ALL_FRAMEWORKS.map((framework) => ({ framework })))('$framework', ({ framework }) => {
    describe.each(modes)('$name', (mode) => {
      let app: App;
      beforeAll(async () => {
        app = await serve(framework, shared, mode, { ...BASE_OPTIONS, ...mode.options });
      });
      afterAll(async () => {
        await app?.close();
      });
      // Cases touch only their own ids and keys, so they run side by side.
      for (const c of cases) {
        test.concurrent(c.name, async (t) => {
          const reason = c.skip?.(app);
          if (reason) t.skip(reason);
          await c.run(app);
        });
      }
    });
    describe('field sources (inline)', () => {
      let app: App;
      beforeAll(async () => {
        app = await serve(framework, shared, modes[0] as Mode, { ...BASE_OPTIONS, ...FIELD_OPTIONS });
      });
      afterAll(async () => {
        await app?.close();
      });
      for (const c of fieldCases) test.concurrent(c.name, () => c.run(app));
    });
    describe('respond hook (inline)', () => {
      let app: App;
      beforeAll(async () => {
        app = await serve(framework, shared, modes[0] as Mode, { ...BASE_OPTIONS, ...RESPOND_OPTIONS });
      });
      afterAll(async () => {
        await app?.close();
      });
      for (const c of respondCases) test.concurrent(c.name, () => c.run(app));
    });
    describe('json schema (inline)', () => {
      let app: App;
      beforeAll(async () => {
        app = await serve(framework, shared, modes[0] as Mode, { ...BASE_OPTIONS, ...JSON_SCHEMA_OPTIONS });
      });
      afterAll(async () => {
        await app?.close();
      });
      for (const c of jsonSchemaCases) test.concurrent(c.name, () => c.run(app));
    });
  });
});
