/**
 * The `respond` hook shapes what the sender receives, never what the inbox decided: over the
 * Express adapter (supertest) and the fetch handler, on every target. Slack's `url_verification`
 * handshake is answered with its challenge as text/plain; an ingest contract answers
 * `202 {"status": "buffered"}` for held and pending events; a hook that throws or returns
 * something unusable is logged and the default answer is sent; a failure that left nothing
 * stored cannot be turned into a 2xx.
 */
import { createHmac, randomUUID } from 'node:crypto';
import express from 'express';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { inbox as expressInbox } from '../adapters/express.js';
import { handler as fetchHandler } from '../adapters/fetch.js';
import { slack } from '../src/delivery/providers.js';
import {
  createInbox,
  type Inbox,
  type InboxOptions,
  InboxOptionsError,
  RejectEvent,
  type RespondHook,
} from '../src/index.js';
import { type Target, type TargetDb, targets } from './support/databases.js';

interface Logged {
  fields: Record<string, unknown>;
  message: string;
}

describe.each(targets)('the respond hook on $name', (target: Target) => {
  let db: TargetDb;
  const opened: Inbox[] = [];
  beforeAll(async () => {
    db = await target.open();
  });
  afterAll(async () => {
    for (const core of opened) await core.close();
    await db?.close();
  });

  /** An inbox over Express whose hook is `respond`; the handler throws on `{"fail": true}`. */
  function app(respond: RespondHook, options: Partial<InboxOptions> = {}) {
    const errors: Logged[] = [];
    const runs: string[] = [];
    const core = createInbox({
      db: db.db,
      schema: db.schema,
      sweepIntervalMs: 0,
      maxAttempts: 5,
      logger: {
        error: (fields: Record<string, unknown>, message: string) => errors.push({ fields, message }),
      },
      ...options,
      respond,
      handle(event) {
        runs.push(event.id);
        if (event.body?.fail) throw new Error('handler secret: failing on purpose');
        if (event.body?.reject) throw new RejectEvent('not for us');
        return { ok: true };
      },
    });
    opened.push(core);
    const server = express().use('/webhooks', expressInbox(core));
    const post = (headers: Record<string, string>, body: string) =>
      request(server)
        .post('/webhooks')
        .set({ 'content-type': 'application/json', ...headers })
        .send(body);
    return { core, post, errors, runs };
  }

  test('an ingest contract: held and pending are 202 buffered, processed is 202 processed; the default otherwise', async () => {
    const seen: string[] = [];
    const { core, post } = app((outcome, event) => {
      seen.push(`${outcome.kind}:${outcome.status}:${event?.id ?? '-'}`);
      if (outcome.kind === 'held' || outcome.kind === 'pending')
        return { status: 202, body: { status: 'buffered' } };
      if (outcome.kind === 'processed') return { status: 202, body: { status: 'processed' } };
      return undefined;
    });
    const key = `k_${randomUUID()}`;
    const second = await post({ 'idempotency-key': `${key}-2`, 'x-key': key, 'x-seq': '2' }, '{"n":2}');
    expect(second.status).toBe(202);
    expect(second.headers['content-type']).toMatch(/^application\/json/);
    expect(second.text).toBe('{"status":"buffered"}');
    expect((await core.event(`${key}-2`))?.status).toBe('held');
    const first = await post({ 'idempotency-key': `${key}-1`, 'x-key': key, 'x-seq': '1' }, '{"n":1}');
    expect(first.status).toBe(202);
    expect(first.body).toEqual({ status: 'processed' });
    // A duplicate is not shaped by this hook: the default, with its replay header.
    const again = await post({ 'idempotency-key': `${key}-1`, 'x-key': key, 'x-seq': '1' }, '{"n":1}');
    expect(again.status).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual({ status: 'duplicate', id: `${key}-1`, result: { ok: true } });
    await core.idle();
    expect((await core.event(`${key}-2`))?.status).toBe('processed');
    expect(seen).toEqual([`held:202:${key}-2`, `processed:200:${key}-1`, `duplicate:200:${key}-1`]);
  });

  test('the hook sees the event (id, key, seq, body, headers), or undefined when none could be read', async () => {
    const events: unknown[] = [];
    const { post } = app((outcome, event) => {
      events.push(event && { kind: outcome.kind, ...event });
      return undefined;
    });
    const id = `evt_${randomUUID()}`;
    expect((await post({ 'idempotency-key': id, 'x-custom': 'yes' }, '{"a":1}')).status).toBe(200);
    const missing = await post({}, '{"a":1}');
    expect(missing.status).toBe(400);
    expect(missing.body.field).toBe('idempotency-key');
    expect(events[0]).toMatchObject({ kind: 'processed', id, key: null, seq: null, body: { a: 1 } });
    expect((events[0] as { headers: Record<string, string> }).headers['x-custom']).toBe('yes');
    expect(events[1]).toBeUndefined();
  });

  test("Slack's url_verification: the handshake is answered 200 with its challenge as text/plain, also when retried", async () => {
    const secret = 'slack-signing-secret';
    const signed = (body: string) => {
      const ts = String(Math.floor(Date.now() / 1000));
      const mac = createHmac('sha256', secret).update(`v0:${ts}:${body}`).digest('hex');
      return { 'x-slack-request-timestamp': ts, 'x-slack-signature': `v0=${mac}` };
    };
    const { post, runs } = app(
      (outcome, event) =>
        event?.body?.type === 'url_verification' &&
        ['processed', 'duplicate', 'pending'].includes(outcome.kind)
          ? { status: 200, headers: { 'content-type': 'text/plain' }, body: String(event.body.challenge) }
          : undefined,
      {
        // The handshake has no event_id: its challenge identifies it.
        provider: slack({
          secret,
          id: (d) => {
            const body = d.body as { event_id?: string; type?: string; challenge?: string } | undefined;
            return body?.type === 'url_verification' ? `url_verification:${body.challenge}` : body?.event_id;
          },
        }),
      },
    );
    const challenge = `3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P-${randomUUID()}`;
    const body = JSON.stringify({ token: 'Jhj5dZrVaK7ZwHHjRyZWjbDl', challenge, type: 'url_verification' });
    for (let i = 0; i < 2; i++) {
      const r = await post(signed(body), body);
      expect(r.status).toBe(200);
      expect(r.headers['content-type']).toMatch(/^text\/plain/);
      expect(r.text).toBe(challenge);
    }
    expect(runs.filter((id) => id === `url_verification:${challenge}`)).toHaveLength(1);
    // An ordinary event of the same app keeps the default answer.
    const event = JSON.stringify({
      type: 'event_callback',
      event_id: `Ev${randomUUID()}`,
      event: { type: 'message' },
    });
    const r = await post(signed(event), event);
    expect(r.status).toBe(200);
    expect(r.body.status).toBe('processed');
    // A forged handshake never reaches the hook as an event: 401, the default.
    const forged = await post({ ...signed(body), 'x-slack-signature': `v0=${'0'.repeat(64)}` }, body);
    expect(forged.status).toBe(401);
    expect(forged.text).not.toContain(challenge);
  });

  test('a failure keeps a failure status: its body and headers can change, a 2xx is refused and logged', async () => {
    let answer: ReturnType<RespondHook>;
    const { core, post, errors } = app((outcome) => (outcome.kind === 'failed' ? answer : undefined));
    const id = `evt_${randomUUID()}`;
    answer = { status: 503, headers: { 'retry-after': '30' }, body: { error: 'try again later' } };
    const shaped = await post({ 'idempotency-key': id }, '{"fail":true}');
    expect(shaped.status).toBe(503);
    expect(shaped.headers['retry-after']).toBe('30');
    expect(shaped.headers['content-type']).toMatch(/^application\/json/);
    expect(shaped.body).toEqual({ error: 'try again later' });
    answer = { status: 503 };
    const statusOnly = await post({ 'idempotency-key': id }, '{"fail":true}');
    expect(statusOnly.status).toBe(503);
    expect(statusOnly.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(statusOnly.body).toMatchObject({ status: 503, id, title: 'Handler failed' });
    answer = { status: 200, body: { ok: true } };
    const refused = await post({ 'idempotency-key': id }, '{"fail":true}');
    expect(refused.status).toBe(500);
    expect(refused.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(refused.body).toMatchObject({ status: 500, id });
    expect(refused.text).not.toContain('handler secret');
    expect(errors.at(-1)?.message).toMatch(
      /respond hook's answer was not used \(status 200 would acknowledge a failed delivery/,
    );
    expect((await core.event(id))?.status).toBe('pending');
  });

  test('a rejected event is stored as a dead letter, so the hook may acknowledge it', async () => {
    const { core, post } = app((outcome) =>
      outcome.kind === 'rejected' ? { status: 200, body: { ignored: true } } : undefined,
    );
    const id = `evt_${randomUUID()}`;
    const r = await post({ 'idempotency-key': id }, '{"reject":true}');
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ignored: true });
    expect((await core.event(id))?.status).toBe('dead');
  });

  test.each([
    [
      'throws',
      () => {
        throw new Error('hook secret: broken');
      },
      /respond hook threw/,
    ],
    ['returns a status out of range', () => ({ status: 700 }), /status must be an integer from 200 to 599/],
    ['returns a status as a string', () => ({ status: '201' }), /status must be an integer/],
    ['returns an unknown member', () => ({ statusCode: 201 }), /"statusCode" is not status, headers or body/],
    [
      'returns a header value with CR/LF',
      () => ({ headers: { 'x-a': 'b\r\nset-cookie: x=1' } }),
      /header x-a has control characters/,
    ],
    ['returns an invalid header name', () => ({ headers: { 'x a': 'b' } }), /header name "x a" is not valid/],
    [
      'overrides Content-Length',
      () => ({ headers: { 'Content-Length': '0' } }),
      /header content-length is set by the server/,
    ],
    [
      'returns a header value that is not a string',
      () => ({ headers: { 'x-n': 1 } }),
      /header x-n must be a string/,
    ],
    ['returns a body that is not JSON', () => ({ body: { n: 1n } }), /body is not JSON-serialisable/],
    ['returns a promise', async () => ({ status: 202 }), /returned a promise/],
    ['returns a string', () => 'ok', /must return an object or undefined/],
  ])('a hook that %s is logged and the default is answered, without its message', async (_, hook, logged) => {
    const { post, errors } = app(hook as unknown as RespondHook);
    const id = `evt_${randomUUID()}`;
    const r = await post({ 'idempotency-key': id }, '{"a":1}');
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(r.body).toEqual({ status: 'processed', id, result: { ok: true } });
    expect(r.text).not.toContain('secret');
    expect(r.headers['set-cookie']).toBeUndefined();
    expect(errors).toHaveLength(1);
    expect(errors[0]?.message).toMatch(logged);
    expect(errors[0]?.fields).toMatchObject({ outcome: 'processed', id });
  });

  test('the fetch handler writes a shaped answer too: any JSON value, text, headers', async () => {
    const hooks: Record<string, ReturnType<RespondHook>> = {
      array: { status: 201, body: [1, 2] },
      text: { body: 'accepted', headers: { 'x-trace': 'abc' } },
    };
    const core = createInbox({
      db: db.db,
      schema: db.schema,
      sweepIntervalMs: 0,
      respond: (_, event) => hooks[String(event?.body?.shape)],
      handle: () => null,
    });
    opened.push(core);
    const serve = fetchHandler(core);
    const post = (shape: string) =>
      serve(
        new Request('http://inbox.test/webhooks', {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': `evt_${randomUUID()}` },
          body: JSON.stringify({ shape }),
        }),
      );
    const array = await post('array');
    expect(array.status).toBe(201);
    expect(array.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await array.json()).toEqual([1, 2]);
    const text = await post('text');
    expect(text.status).toBe(200);
    expect(text.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(text.headers.get('x-trace')).toBe('abc');
    expect(await text.text()).toBe('accepted');
    const plain = await post('none');
    expect(((await plain.json()) as { status: string }).status).toBe('processed');
  });
});

describe('the respond option', () => {
  test('something that is not a function is refused, naming the option', () => {
    expect(() =>
      createInbox({ db: 'memory', handle: () => {}, respond: { processed: {} } as never }),
    ).toThrow(InboxOptionsError);
    expect(() => createInbox({ db: 'memory', handle: () => {}, respond: 'x' as never })).toThrow(/respond/);
  });
});
