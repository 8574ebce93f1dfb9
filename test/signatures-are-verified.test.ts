/**
 * Signature verification, tested against signatures made by the senders' own libraries
 * (`standardwebhooks`' Webhook#sign, `stripe`'s generateTestHeaderString), over HTTP through
 * the ledger example. A delivery that fails verification is 401 problem+json naming the header,
 * and leaves every inbox table and the ledger empty: it was never claimed, its handler never ran.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type LedgerServer, startLedger, verifyFromEnv } from '../examples/ledger/start.js';
import {
  createInbox,
  hmacSignature,
  type InboxOptions,
  InboxOptionsError,
  standardWebhooks,
  stripeSignature,
  UnauthorizedDeliveryError,
} from '../src/index.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';

const whsec = () => `whsec_${randomBytes(24).toString('base64')}`;
const OLD_SW_SECRET = whsec();
const SW_SECRET = whsec();
const STRIPE_SECRET = `whsec_${randomBytes(16).toString('hex')}`;
const OLD_STRIPE_SECRET = `whsec_${randomBytes(16).toString('hex')}`;
const HMAC_SECRET = 'github-shared-secret';
const uid = (p: string) => `${p}_${randomBytes(6).toString('hex')}`;
const now = () => Math.floor(Date.now() / 1000);
const body = (amount = 1) => JSON.stringify({ amount });

interface Reply {
  status: number;
  headers: Headers;
  json: any;
}

interface Server extends LedgerServer {
  schema: string;
  post(headers: Record<string, string>, body: string): Promise<Reply>;
  /** Rows in every inbox table: events, keys, gaps. */
  inboxRows(): Promise<number>;
  balance(key: string): Promise<number>;
}

async function serve(db: TargetDb, inbox: Partial<InboxOptions>): Promise<Server> {
  const schema = uniqueName('wi');
  const ledgerSchema = uniqueName('app');
  const server = await startLedger({
    ledgerSchema,
    inbox: { ...inbox, db: db.db, schema, sweepIntervalMs: 0 },
  });
  const closeServer = server.close;
  return Object.assign(server, {
    schema,
    async post(headers: Record<string, string>, payload: string): Promise<Reply> {
      const res = await fetch(`${server.url}/webhooks`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: payload,
      });
      return { status: res.status, headers: res.headers, json: await res.json() };
    },
    async inboxRows() {
      const k = await server.inbox.kysely();
      const { rows } = await sql<{ n: string }>`select
          (select count(*) from ${sql.id(schema, 'events')}) +
          (select count(*) from ${sql.id(schema, 'keys')}) +
          (select count(*) from ${sql.id(schema, 'gaps')}) as n`.execute(k);
      return Number(rows[0].n);
    },
    async balance(key: string) {
      return (await server.ledger.account(await server.inbox.kysely(), key)).balance;
    },
    close: async () => {
      await sql`drop schema if exists ${sql.id(schema)}, ${sql.id(ledgerSchema)} cascade`.execute(
        await server.inbox.kysely(),
      );
      await closeServer();
    },
  });
}

function expectUnauthorized(r: Reply, field: string) {
  expect(r.status, JSON.stringify(r.json)).toBe(401);
  expect(r.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(r.json).toMatchObject({ status: 401, field, title: 'Signature verification failed' });
  expect(r.json.detail).toContain(field);
}

/**
 * Posts a delivery that must fail verification, on a key of its own, and checks that nothing
 * of it reached the inbox (no event, no key row, no row count change) or the ledger.
 */
async function expectRejected(server: Server, headers: Record<string, string>, id: string, field: string) {
  const key = uid('acct');
  const before = await server.inboxRows();
  expectUnauthorized(await server.post({ ...headers, 'x-key': key }, body(9)), field);
  expect(await server.inboxRows()).toBe(before);
  expect(await server.inbox.event(id)).toBeUndefined();
  expect(await server.inbox.keyState(key)).toBeUndefined();
  expect(await server.balance(key)).toBe(0);
}

describe.each(targets)('signature verification on $name', (target) => {
  let db: TargetDb;
  let sw: Server;
  let stripe: Server;
  let github: Server;
  beforeAll(async () => {
    db = await target.open();
    // Standard Webhooks with two secrets, as during a rotation; the ledger's env switch.
    sw = await serve(db, {
      verify: standardWebhooks({ secret: [OLD_SW_SECRET, SW_SECRET] }),
    });
    stripe = await serve(db, { verify: stripeSignature({ secret: [STRIPE_SECRET, OLD_STRIPE_SECRET] }) });
    github = await serve(db, {
      verify: hmacSignature({ header: 'X-Hub-Signature-256', prefix: 'sha256=', secret: HMAC_SECRET }),
    });
  });
  afterAll(async () => {
    await Promise.all([sw, stripe, github].map((s) => s?.close()));
    await db?.close();
  });

  describe('Standard Webhooks', () => {
    const signed = (secret: string, id: string, payload: string, at = new Date()) => ({
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': new Webhook(secret).sign(id, at, payload),
    });

    test('a delivery signed by the sender library is applied once, webhook-id as its id', async () => {
      const id = uid('msg');
      const payload = body(5);
      const first = await sw.post(signed(SW_SECRET, id, payload), payload);
      expect(first.status).toBe(200);
      expect(first.json).toMatchObject({ status: 'processed', id });
      const again = await sw.post(signed(SW_SECRET, id, payload), payload);
      expect(again.json).toMatchObject({ status: 'duplicate', id });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect((await sw.inbox.event(id))?.status).toBe('processed');
    });

    test('webhook-id is the id: a captured delivery sent again under another Idempotency-Key is 400, not a new event', async () => {
      const id = uid('msg');
      const payload = body(4);
      const key = uid('acct');
      const headers = { ...signed(SW_SECRET, id, payload), 'x-key': key, 'x-seq': '1' };
      expect((await sw.post(headers, payload)).json).toMatchObject({ status: 'processed', id });
      // The same signed bytes, replayed with an unsigned Idempotency-Key of the attacker's choice.
      const replay = await sw.post({ ...headers, 'idempotency-key': uid('idem') }, payload);
      expect(replay.status).toBe(400);
      expect(replay.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(replay.json).toMatchObject({ status: 400, field: 'idempotency-key' });
      // An Idempotency-Key equal to webhook-id is the same event: a duplicate.
      const same = await sw.post({ ...headers, 'idempotency-key': id }, payload);
      expect(same.json).toMatchObject({ status: 'duplicate', id });
      expect(await sw.balance(key)).toBe(4);
    });

    test('the previous secret still verifies during a rotation; so does one good signature among several', async () => {
      const payload = body(1);
      expect((await sw.post(signed(OLD_SW_SECRET, uid('msg'), payload), payload)).status).toBe(200);
      const id = uid('msg');
      const headers = signed(SW_SECRET, id, payload);
      const bogus = `v1,${randomBytes(32).toString('base64')}`;
      headers['webhook-signature'] =
        `v1a,${randomBytes(64).toString('base64')} ${bogus} ${headers['webhook-signature']}`;
      expect((await sw.post(headers, payload)).status).toBe(200);
    });

    test.each([
      ['signed with another secret', 'webhook-signature', () => signed(whsec(), uid('msg'), body(9))],
      // The body sent is body(9).
      ['a tampered body', 'webhook-signature', () => signed(SW_SECRET, uid('msg'), body(1))],
      [
        'webhook-id changed after signing',
        'webhook-signature',
        () => ({ ...signed(SW_SECRET, uid('msg'), body(9)), 'webhook-id': uid('msg') }),
      ],
      // Node's base64 decoder skips unknown characters and missing padding: the signature
      // would still match. Only canonical base64 is compared.
      [
        'the right signature with junk appended',
        'webhook-signature',
        () => {
          const h = signed(SW_SECRET, uid('msg'), body(9));
          return { ...h, 'webhook-signature': `${h['webhook-signature']}!!` };
        },
      ],
      [
        'the right signature without its padding',
        'webhook-signature',
        () => {
          const h = signed(SW_SECRET, uid('msg'), body(9));
          return { ...h, 'webhook-signature': h['webhook-signature'].replace(/=+$/, '') };
        },
      ],
      [
        'a timestamp 6 minutes old',
        'webhook-timestamp',
        () => signed(SW_SECRET, uid('msg'), body(9), new Date(Date.now() - 360_000)),
      ],
      [
        'a timestamp 6 minutes ahead',
        'webhook-timestamp',
        () => signed(SW_SECRET, uid('msg'), body(9), new Date(Date.now() + 360_000)),
      ],
      [
        'no webhook-signature',
        'webhook-signature',
        () => {
          const { 'webhook-signature': _, ...rest } = signed(SW_SECRET, uid('msg'), body(9));
          return rest;
        },
      ],
    ])('%s: 401 naming %s, nothing stored, handler not run', async (_name, field, headers) => {
      const h = headers();
      await expectRejected(sw, { 'x-seq': '1', ...h }, h['webhook-id'], field);
    });
  });

  describe('Stripe', () => {
    const header = (payload: string, secret = STRIPE_SECRET, timestamp = now()) =>
      Stripe.webhooks.generateTestHeaderString({ payload, secret, timestamp });

    test('a delivery signed by the stripe library is applied; the rolled secret still verifies', async () => {
      const payload = body(3);
      const r = await stripe.post(
        { 'stripe-signature': header(payload), 'idempotency-key': uid('evt') },
        payload,
      );
      expect(r.status).toBe(200);
      expect(r.json.status).toBe('processed');
      const old = header(payload, OLD_STRIPE_SECRET);
      expect(
        (await stripe.post({ 'stripe-signature': old, 'idempotency-key': uid('evt') }, payload)).status,
      ).toBe(200);
    });

    test("the signed body's id is the event id: a replay under another Idempotency-Key is 400, without one a duplicate", async () => {
      const evt = uid('evt');
      const key = uid('acct');
      const payload = JSON.stringify({ id: evt, amount: 6 });
      const headers = { 'stripe-signature': header(payload), 'x-key': key, 'x-seq': '1' };
      expect((await stripe.post(headers, payload)).json).toMatchObject({ status: 'processed', id: evt });
      const replay = await stripe.post({ ...headers, 'idempotency-key': uid('evt') }, payload);
      expect(replay.status).toBe(400);
      expect(replay.json).toMatchObject({ field: 'idempotency-key' });
      expect((await stripe.post(headers, payload)).json).toMatchObject({ status: 'duplicate', id: evt });
      expect(await stripe.balance(key)).toBe(6);
    });

    test('several v1 signatures: one matching is enough', async () => {
      const payload = body(2);
      const t = now();
      const other = header(payload, `whsec_${randomBytes(16).toString('hex')}`, t).split(',')[1];
      const both = `${header(payload, STRIPE_SECRET, t)},${other}`;
      expect(
        (await stripe.post({ 'stripe-signature': both, 'idempotency-key': uid('evt') }, payload)).status,
      ).toBe(200);
    });

    test.each([
      ['another secret', () => header(body(9), `whsec_${randomBytes(16).toString('hex')}`)],
      ['a tampered body', () => header(body(1))],
      ['a timestamp 6 minutes old', () => header(body(9), STRIPE_SECRET, now() - 360)],
      ['a timestamp 6 minutes ahead', () => header(body(9), STRIPE_SECRET, now() + 360)],
      ['no v1 signature', () => `t=${now()}`],
    ])('%s: 401 naming stripe-signature, nothing stored', async (_name, make) => {
      const id = uid('evt');
      await expectRejected(
        stripe,
        { 'stripe-signature': make(), 'idempotency-key': id, 'x-seq': '1' },
        id,
        'stripe-signature',
      );
    });

    test('a missing Stripe-Signature is 401 naming it', async () => {
      const id = uid('evt');
      await expectRejected(stripe, { 'idempotency-key': id, 'x-seq': '1' }, id, 'stripe-signature');
    });
  });

  describe('generic HMAC-SHA256 header (GitHub style)', () => {
    const sig = (payload: string, secret = HMAC_SECRET) =>
      `sha256=${createHmac('sha256', secret).update(payload).digest('hex')}`;

    test('a correctly signed delivery is applied', async () => {
      const payload = body(4);
      const r = await github.post(
        { 'x-hub-signature-256': sig(payload), 'idempotency-key': uid('gh') },
        payload,
      );
      expect(r.status).toBe(200);
    });

    test.each([
      ['another secret', sig(body(9), 'nope')],
      ['no sha256= prefix', sig(body(9)).slice('sha256='.length)],
      ['not hex', 'sha256=zz'],
      // Node's hex decoder stops at an odd trailing digit: the digest would still match.
      ['the right digest with a stray hex digit', `${sig(body(9))}0`],
    ])('%s: 401 naming the header, nothing stored', async (_name, value) => {
      const id = uid('gh');
      const headers = { 'x-hub-signature-256': value, 'idempotency-key': id, 'x-seq': '1' };
      await expectRejected(github, headers, id, 'x-hub-signature-256');
    });
  });

  test('base64 HMAC (Shopify style) and a custom verify hook, through the core', async () => {
    const handled: string[] = [];
    const schema = uniqueName('wi');
    const shopify = createInbox({
      db: db.db,
      schema,
      sweepIntervalMs: 0,
      verify: hmacSignature({ header: 'x-shopify-hmac-sha256', encoding: 'base64', secret: 'shh' }),
      handle: (event) => void handled.push(event.id),
    });
    const payload = Buffer.from(body(1));
    const good = createHmac('sha256', 'shh').update(payload).digest('base64');
    const ok = await shopify.receive({
      headers: {
        'X-Shopify-Hmac-SHA256': good,
        'Idempotency-Key': 'shop-1',
        'content-type': 'application/json',
      },
      rawBody: payload,
    });
    expect(ok.status).toBe(200);
    const bad = await shopify.receive({
      headers: { 'X-Shopify-Hmac-SHA256': good, 'Idempotency-Key': 'shop-2' },
      rawBody: Buffer.from(body(2)),
    });
    expect(bad.status).toBe(401);
    expect(handled).toEqual(['shop-1']);
    await shopify.close();

    const custom = createInbox({
      db: db.db,
      schema,
      sweepIntervalMs: 0,
      verify: (d) => {
        if (d.headers['x-token'] === 'crash') throw new Error('key service down: secret=abc');
        if (d.headers['x-token'] !== 'let-me-in')
          throw new UnauthorizedDeliveryError('x-token', 'x-token is wrong');
        return { id: `custom-${d.headers['x-delivery']}` };
      },
      handle: (event) => void handled.push(event.id),
    });
    const rejected = await custom.receive({ headers: { 'x-token': 'guess' }, rawBody: payload });
    expect(rejected).toMatchObject({ status: 401, body: { field: 'x-token' } });
    const crashed = await custom.receive({ headers: { 'x-token': 'crash' }, rawBody: payload });
    expect(crashed.status).toBe(503);
    expect(JSON.stringify(crashed.body)).not.toContain('secret=abc');
    const accepted = await custom.receive({
      headers: { 'x-token': 'let-me-in', 'x-delivery': '7', 'content-type': 'application/json' },
      rawBody: payload,
    });
    expect(accepted).toMatchObject({ status: 200, body: { status: 'processed', id: 'custom-7' } });
    expect(handled).toEqual(['shop-1', 'custom-7']);
    await sql`drop schema ${sql.id(schema)} cascade`.execute(await custom.kysely());
    await custom.close();
  });
});

describe('verification options are checked at construction', () => {
  const handle = () => {};
  test.each([
    ['verify', () => createInbox({ handle, verify: 'yes' as any })],
    ['verify.secret', () => standardWebhooks({ secret: 'whsec_not base64!' })],
    ['verify.secret', () => standardWebhooks({ secret: [] })],
    ['verify.toleranceSeconds', () => standardWebhooks({ secret: whsec(), toleranceSeconds: 0 })],
    ['verify.secret', () => stripeSignature({ secret: '' })],
    ['verify.header', () => hmacSignature({ header: 'bad header', secret: 's' })],
    ['verify.encoding', () => hmacSignature({ header: 'x-sig', secret: 's', encoding: 'hex64' as any })],
  ])('a bad %s is rejected naming it', (option, make) => {
    expect(make).toThrow(InboxOptionsError);
    expect(make).toThrow(`\`${option}\``);
  });

  test('toleranceSeconds widens the timestamp window', () => {
    const payload = body(1);
    const delivery = {
      headers: {
        'stripe-signature': Stripe.webhooks.generateTestHeaderString({
          payload,
          secret: STRIPE_SECRET,
          timestamp: now() - 360,
        }),
      },
      rawBody: Buffer.from(payload),
    };
    expect(() => stripeSignature({ secret: STRIPE_SECRET })(delivery)).toThrow(UnauthorizedDeliveryError);
    expect(stripeSignature({ secret: STRIPE_SECRET, toleranceSeconds: 600 })(delivery)).toBeUndefined();
  });

  test('the ledger example turns Standard Webhooks on when WEBHOOK_SECRET is set', () => {
    expect(verifyFromEnv({})).toBeUndefined();
    const verify = verifyFromEnv({ WEBHOOK_SECRET: SW_SECRET })!;
    const payload = Buffer.from(body(1));
    const at = new Date();
    const headers = {
      'webhook-id': 'msg_1',
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': new Webhook(SW_SECRET).sign('msg_1', at, payload),
    };
    expect(verify({ headers, rawBody: payload })).toEqual({ id: 'msg_1' });
    expect(() =>
      verify({ headers: { ...headers, 'webhook-signature': 'v1,AAAA' }, rawBody: payload }),
    ).toThrow(UnauthorizedDeliveryError);
  });
});
