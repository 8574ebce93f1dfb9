/**
 * The Stripe quick start (examples/stripe) runs as written: a payment_intent.succeeded event,
 * signed as Stripe signs it, inserts one payment; its redelivery inserts none; another secret
 * is refused.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type StripeExample, startStripeExample } from '../examples/stripe/server.js';
import { signedDelivery } from '../src/testing/index.js';
import { freshPGlite } from './support/databases.js';
import { whsec } from './support/provider-deliveries.js';

const secret = whsec();
let db: Awaited<ReturnType<typeof freshPGlite>>;
let example: StripeExample;
beforeAll(async () => {
  db = await freshPGlite();
  example = await startStripeExample({ db, secret, logger: false });
});
afterAll(async () => {
  await example.close();
  await db.close();
});

const event = {
  id: 'evt_1',
  object: 'event',
  type: 'payment_intent.succeeded',
  created: 1_700_000_000,
  data: { object: { id: 'pi_1', object: 'payment_intent', amount: 2000, currency: 'eur' } },
};

async function post(delivery: { headers: Record<string, string>; body: string }) {
  const res = await fetch(`${example.url}/webhooks`, {
    method: 'POST',
    headers: delivery.headers,
    body: delivery.body,
  });
  return { status: res.status, replayed: res.headers.get('idempotent-replayed'), body: await res.json() };
}

it('records a payment once, however often Stripe delivers it', async () => {
  const first = await post(signedDelivery('stripe', event, { secret }));
  expect(first).toMatchObject({
    status: 200,
    body: { status: 'processed', id: 'evt_1', result: { payment: 'pi_1' } },
  });
  const again = await post(signedDelivery('stripe', event, { secret }));
  expect(again).toMatchObject({ status: 200, replayed: 'true', body: { status: 'duplicate' } });
  const { rows } = await sql`select id, amount::int as amount from payments`.execute(
    await example.inbox.kysely(),
  );
  expect(rows).toEqual([{ id: 'pi_1', amount: 2000 }]);
  // Rows live under the provider's name, the inbox's source by default.
  expect(example.inbox.options.source).toBe('stripe');
});

it('refuses a delivery signed with another secret (the CLI secret mixed up with the dashboard one)', async () => {
  const refused = await post(signedDelivery('stripe', { ...event, id: 'evt_2' }, { secret: whsec() }));
  expect(refused).toMatchObject({ status: 401, body: { field: 'stripe-signature' } });
});
