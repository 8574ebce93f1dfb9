import { createHmac } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startLedger } from '../examples/ledger/start.js';
import { standardWebhooks } from '../src/index.js';
import { createSender, decodeSecret, type Sender, sign } from '../src/sender/index.js';
import { recordingServer } from './support/recording-server.js';

let sender: Sender | undefined;
let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await sender?.close();
  await close?.();
});

describe('Standard Webhooks signatures', () => {
  it('matches the reference test vector', () => {
    const key = decodeSecret('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
    expect(sign(key, 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, Buffer.from('{"test": 2432232314}'))).toBe(
      'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    );
  });

  it('signs every attempt, retries included, over the exact bytes sent', async () => {
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    const server = await recordingServer((a) => (a.n === 1 ? { status: 500 } : { status: 200 }));
    close = server.close;
    sender = createSender({ endpoint: server.url, secret, baseMs: 1, capMs: 1, breaker: false });
    await sender.send({ id: 'evt_1', key: 'k', body: { amount: 5 } });
    expect(server.arrivals).toHaveLength(2);
    const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
    for (const a of server.arrivals) {
      const id = a.headers['webhook-id'];
      const timestamp = a.headers['webhook-timestamp'];
      expect(id).toBe('evt_1');
      expect(a.headers['idempotency-key']).toBe('evt_1');
      expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(300);
      const expected = createHmac('sha256', key)
        .update(`${id}.${timestamp}.`)
        .update(a.body)
        .digest('base64');
      expect(a.headers['webhook-signature']).toBe(`v1,${expected}`);
    }
  });

  it('sends nothing signed without a secret', async () => {
    const server = await recordingServer();
    close = server.close;
    sender = createSender({ endpoint: server.url });
    await sender.send({ body: {} });
    expect(server.arrivals[0].headers['webhook-signature']).toBeUndefined();
  });
});

describe('the sender signs what the inbox verifies', () => {
  it('signed events are applied; events signed with the wrong secret are refused (401) and dead-lettered', async () => {
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    const ledger = await startLedger({
      inbox: { verify: standardWebhooks({ secret }), sweepIntervalMs: 0 },
    });
    close = () => ledger.close();
    sender = createSender({ endpoint: `${ledger.url}/webhooks`, secret, breaker: false });
    const results = await Promise.all(
      [1, 2, 3].map((amount) => sender!.send({ key: 'acct', body: { amount } })),
    );
    expect(results.map((r) => r.status)).toEqual(['delivered', 'delivered', 'delivered']);
    const account = await ledger.ledger.account(await ledger.inbox.kysely(), 'acct');
    expect(account.balance).toBe(6);
    expect(account.entries.map((e) => e.seq)).toEqual([1, 2, 3]);

    const impostor = createSender({
      endpoint: `${ledger.url}/webhooks`,
      secret: 'whsec_' + Buffer.from('not the right key').toString('base64'),
      breaker: false,
    });
    const refused = await impostor.send({ key: 'other', body: { amount: 100 } });
    await impostor.close();
    expect(refused).toMatchObject({ status: 'dead-lettered', reason: 'rejected', responseStatus: 401 });
    expect((await ledger.ledger.account(await ledger.inbox.kysely(), 'other')).entries).toEqual([]);
  });
});
