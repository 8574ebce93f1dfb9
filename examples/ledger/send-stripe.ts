/**
 * Sends one Stripe event, signed as Stripe signs it, to the ledger example: the way to try
 * latest-wins ordering without the Stripe CLI.
 *
 *   PROVIDER=stripe WEBHOOK_SECRET=whsec_test ORDER=latest npm run example
 *   WEBHOOK_SECRET=whsec_test npx tsx examples/ledger/send-stripe.ts evt_2 200 pi_1 700   # applied
 *   WEBHOOK_SECRET=whsec_test npx tsx examples/ledger/send-stripe.ts evt_1 100 pi_1 500   # superseded
 *   curl localhost:3000/accounts/pi_1                                                      # evt_2 only
 *
 * Arguments: the event id, its `created` (the version latest-wins compares), the object's id
 * (the key), its amount. URL (http://localhost:3000/webhooks) says where to post.
 */
import { signedDelivery } from '../../src/testing/index.js';

const [id, created, object = 'pi_1', amount = '100'] = process.argv.slice(2);
const secret = process.env.WEBHOOK_SECRET;
if (!id || !created || !/^\d+$/.test(created) || !/^\d+$/.test(amount) || !secret) {
  console.error(
    'usage: WEBHOOK_SECRET=whsec_… npx tsx examples/ledger/send-stripe.ts <event id> <created> [object id] [amount]',
  );
  process.exit(2);
}
const event = {
  id,
  object: 'event',
  type: 'payment_intent.succeeded',
  created: Number(created),
  data: { object: { id: object, object: 'payment_intent', amount: Number(amount) } },
};
const { headers, body } = signedDelivery('stripe', event, { secret });
const res = await fetch(process.env.URL ?? 'http://localhost:3000/webhooks', {
  method: 'POST',
  headers,
  body,
});
console.log(res.status, await res.text());
