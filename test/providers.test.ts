/**
 * Provider presets (`webhook-inbox/providers`), each through the ledger example over HTTP on
 * every target, turned on as `PROVIDER=<name>` with `WEBHOOK_SECRET` turns it on. Deliveries are
 * signed by the provider's own SDK where one signs (stripe's generateTestHeaderString,
 * @octokit/webhooks-methods' sign, svix's and standardwebhooks' Webhook#sign), else by an
 * independent HMAC per the provider's documentation; the verifiers are also checked against the
 * providers' published worked examples (Slack, GitHub).
 *
 * For every preset: a signed delivery is applied once; the same event sent again with a fresh
 * signature is a duplicate (200, Idempotent-Replayed), applied once; a tampered body, a wrong
 * secret, a missing signature header and (where signed) a stale timestamp are 401 with nothing
 * stored.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from 'vitest';
import { type LedgerServer, providerFromEnv, startLedger } from '../examples/ledger/start.js';
import { github, slack, stripe } from '../src/delivery/providers.js';
import { createInbox, InboxOptionsError, UnauthorizedDeliveryError } from '../src/index.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';
import { type Case, cases, hex, now, type Signed, whsec } from './support/provider-deliveries.js';

interface Reply {
  status: number;
  headers: Headers;
  json: any;
}

describe.each(targets)('provider presets on $name', (target) => {
  let db: TargetDb;
  beforeAll(async () => {
    db = await target.open();
  });
  afterAll(async () => {
    await db?.close();
  });

  describe.each(cases)('$provider', (c) => {
    let server: LedgerServer;
    const schema = uniqueName('wi');
    const ledgerSchema = uniqueName('app');
    beforeAll(async () => {
      server = await startLedger({
        ledgerSchema,
        inbox: {
          db: db.db,
          schema,
          sweepIntervalMs: 0,
          provider: providerFromEnv({ PROVIDER: c.provider, WEBHOOK_SECRET: c.secret }),
        },
      });
    });
    afterAll(async () => {
      await sql`drop schema if exists ${sql.id(schema)}, ${sql.id(ledgerSchema)} cascade`.execute(
        await server.inbox.kysely(),
      );
      await server.close();
    });

    const post = async ({ headers, body }: Signed): Promise<Reply> => {
      const res = await fetch(`${server.url}/webhooks`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body,
      });
      return { status: res.status, headers: res.headers, json: await res.json() };
    };
    const entriesOf = async (id: string) =>
      (await server.ledger.account(await server.inbox.kysely(), 'none')).entries.filter((e) => e.id === id);

    test('a signed delivery is applied once; the same event with a fresh signature is a duplicate', async () => {
      const e = c.event();
      const first = await post(await e.deliver(c.secret, now()));
      expect(first.status, JSON.stringify(first.json)).toBe(200);
      expect(first.json).toMatchObject({ status: 'processed', id: e.id });
      const again = await post(await e.deliver(c.secret, now() + 1));
      expect(again.status, JSON.stringify(again.json)).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.json).toMatchObject({ status: 'duplicate', id: e.id });
      expect(await entriesOf(e.id)).toEqual([{ id: e.id, seq: null, amount: 5 }]);
    });

    const rejected: [string, (e: ReturnType<Case['event']>) => Promise<Signed>][] = [
      [
        c.unsignedBody ? 'a wrong token (the body is not signed)' : 'a tampered body',
        async (e) => {
          const d = await e.deliver(c.unsignedBody ? 'forged' : c.secret, now());
          return { ...d, body: d.body.replace('"amount":5', '"amount":500') };
        },
      ],
      [
        'a wrong secret',
        (e) =>
          Promise.resolve(
            e.deliver(
              c.provider === 'svix' || c.provider === 'standardWebhooks' ? whsec() : `${c.secret}x`,
              now(),
            ),
          ),
      ],
      [
        'a missing signature header',
        async (e) => {
          const d = await e.deliver(c.secret, now());
          const { [c.signatureHeader]: _, ...headers } = d.headers;
          return { ...d, headers };
        },
      ],
      ...(c.malform === undefined
        ? []
        : [
            [
              'a valid signature in a malformed encoding',
              async (e) => {
                const d = await e.deliver(c.secret, now());
                const value = d.headers[c.signatureHeader];
                return { ...d, headers: { ...d.headers, [c.signatureHeader]: c.malform!(value) } };
              },
            ] as [string, (e: ReturnType<Case['event']>) => Promise<Signed>],
          ]),
      ...(c.staleSeconds === undefined
        ? []
        : [
            [
              'a stale timestamp',
              (e) => Promise.resolve(e.deliver(c.secret, now() - (c.staleSeconds as number))),
            ] as [string, (e: ReturnType<Case['event']>) => Promise<Signed>],
          ]),
    ];
    test.each(rejected)('%s is 401 naming the signature, with nothing stored', async (_, make) => {
      const e = c.event();
      const r = await post(await make(e));
      expect(r.status, JSON.stringify(r.json)).toBe(401);
      expect(r.json.field).toEqual(expect.any(String));
      expect(await server.inbox.event(e.id)).toBeUndefined();
      expect(await entriesOf(e.id)).toEqual([]);
    });
  });
});

describe("verifiers against the providers' published examples", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  test("Slack's worked example verifies at its time, and not five minutes later", async () => {
    // docs.slack.dev, "Verifying requests from Slack".
    const secret = '8f742231b10e8888abcd99yyyzzz85a5';
    const rawBody = Buffer.from(
      'token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c',
    );
    const headers = {
      'x-slack-request-timestamp': '1531420618',
      'x-slack-signature': 'v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503',
    };
    const { verify } = slack({ secret });
    vi.useFakeTimers({ now: 1531420618_000 + 60_000, toFake: ['Date'] });
    await expect(Promise.resolve(verify({ headers, rawBody }))).resolves.toBeUndefined();
    vi.setSystemTime(1531420618_000 + 301_000);
    expect(() => verify({ headers, rawBody })).toThrow(UnauthorizedDeliveryError);
  });

  test("GitHub's worked example verifies; another secret does not", () => {
    // docs.github.com, "Validating webhook deliveries".
    const headers = {
      'x-hub-signature-256': 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17',
    };
    const rawBody = Buffer.from('Hello, World!');
    expect(github({ secret: "It's a Secret to Everybody" }).verify({ headers, rawBody })).toBeUndefined();
    expect(() => github({ secret: 'another' }).verify({ headers, rawBody })).toThrow(
      UnauthorizedDeliveryError,
    );
  });
});

describe('provider options', () => {
  test('a preset with verify or fields.id beside it is refused naming the option', () => {
    const provider = stripe({ secret: 'whsec_x' });
    const handle = () => null;
    expect(() => createInbox({ db: 'memory', handle, provider, verify: () => {} })).toThrow(
      expect.objectContaining({ name: InboxOptionsError.name, option: 'verify' }),
    );
    expect(() => createInbox({ db: 'memory', handle, provider, fields: { id: 'x-id' } })).toThrow(
      expect.objectContaining({ name: InboxOptionsError.name, option: 'fields.id' }),
    );
    expect(() => createInbox({ db: 'memory', handle, provider: {} as never })).toThrow(
      expect.objectContaining({ option: 'provider' }),
    );
  });

  test('presets are overridable: the id the inbox reads, and order turned off', async () => {
    const db = await targets.at(-1)!.open();
    const schema = uniqueName('wi');
    const inboxes: Array<ReturnType<typeof createInbox>> = [];
    const make = (options: Partial<Parameters<typeof createInbox>[0]>) => {
      const inbox = createInbox({
        db: db.db,
        schema,
        sweepIntervalMs: 0,
        handle: () => ({ ok: true }),
        ...options,
      });
      inboxes.push(inbox);
      return inbox;
    };
    try {
      // GitHub with the id from another header: that is the event's id, not X-GitHub-Delivery.
      const gh = make({ provider: github({ secret: 's', id: (d) => d.headers['x-request-id'] }) });
      const body = JSON.stringify({ amount: 1 });
      const requestId = `req-${randomUUID()}`;
      const got = await gh.receive({
        headers: {
          'content-type': 'application/json',
          'x-github-delivery': 'gh-delivery-1',
          'x-request-id': requestId,
          'x-hub-signature-256': `sha256=${hex('s', body)}`,
        },
        rawBody: Buffer.from(body),
      });
      expect(got.body).toMatchObject({ status: 'processed', id: requestId });
      expect(await gh.event('gh-delivery-1')).toBeUndefined();

      // Stripe's object and version are what latest-wins orders by; with order: false, none.
      const secret = 'whsec_test';
      const stripeEvent = (created: number) => {
        const payload = JSON.stringify({
          id: `evt_${randomUUID()}`,
          created,
          data: { object: { id: 'pi_1' } },
        });
        return {
          headers: {
            'content-type': 'application/json',
            'stripe-signature': Stripe.webhooks.generateTestHeaderString({ payload, secret }),
          },
          rawBody: Buffer.from(payload),
        };
      };
      const latest = make({ provider: stripe({ secret }), order: { policy: 'latest' }, source: 'stripe' });
      expect((await latest.receive(stripeEvent(200))).body).toMatchObject({ status: 'processed' });
      expect((await latest.receive(stripeEvent(100))).body).toMatchObject({ status: 'superseded' });
      expect(() => make({ provider: stripe({ secret, order: false }), order: { policy: 'latest' } })).toThrow(
        expect.objectContaining({ name: InboxOptionsError.name, option: 'order.key' }),
      );
    } finally {
      const k = await inboxes[0]?.kysely();
      if (k) await sql`drop schema if exists ${sql.id(schema)} cascade`.execute(k);
      for (const inbox of inboxes) await inbox.close();
      await db.close();
    }
  });

  test('PROVIDER without WEBHOOK_SECRET, or an unknown one, is refused', () => {
    expect(() => providerFromEnv({ PROVIDER: 'stripe' })).toThrow(/WEBHOOK_SECRET/);
    expect(() => providerFromEnv({ PROVIDER: 'nope', WEBHOOK_SECRET: 'x' })).toThrow(
      /PROVIDER must be one of/,
    );
  });
});
