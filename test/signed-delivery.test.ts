/**
 * `signedDelivery` (webhook-inbox/testing) signs as each provider signs: every preset's own
 * verifier accepts its delivery (and refuses one signed with another secret), and so does the
 * provider's SDK where it is a dev dependency (Stripe, Svix, Standard Webhooks, Octokit).
 */
import { verify as octokitVerify } from '@octokit/webhooks-methods';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { Webhook as SvixWebhook } from 'svix';
import { describe, expect, it } from 'vitest';
import { providers } from '../src/delivery/providers.js';
import { UnauthorizedDeliveryError } from '../src/index.js';
import { signedDelivery } from '../src/testing/index.js';
import { cases, now, whsec } from './support/provider-deliveries.js';

/** The type as the provider's headers carry it, for those that carry it in one. */
function headerType(provider: string, type: string): string | undefined {
  if (provider === 'github') return type.split('.')[0];
  if (provider === 'shopify') return type;
  if (provider === 'gitlab') return 'Push Hook';
  return undefined;
}

describe.each(cases)('signedDelivery($provider)', (c) => {
  async function signed(secret = c.secret) {
    const event = c.event();
    const { body } = await event.deliver(c.secret, now());
    return {
      event,
      delivery: signedDelivery(c.provider, JSON.parse(body), {
        secret,
        id: event.id,
        type: headerType(c.provider, c.type),
      }),
    };
  }

  it("passes the preset's own verifier, which reads the event's id from it", async () => {
    const { event, delivery } = await signed();
    const preset = providers[c.provider]({ secret: c.secret });
    const verified = await preset.verify({ headers: delivery.headers, rawBody: delivery.rawBody });
    if (verified?.id !== undefined) expect(verified.id).toBe(event.id);
    // The same preset object works as the first argument.
    expect(signedDelivery(preset, { a: 1 }, { secret: c.secret }).headers[c.signatureHeader]).toBeDefined();
  });

  it('signed with another secret, it is refused', async () => {
    const other = c.secret.startsWith('whsec_') ? whsec() : `${c.secret}-other`;
    const { delivery } = await signed(other);
    const preset = providers[c.provider]({ secret: c.secret });
    await expect(
      (async () => preset.verify({ headers: delivery.headers, rawBody: delivery.rawBody }))(),
    ).rejects.toBeInstanceOf(UnauthorizedDeliveryError);
  });
});

describe("signedDelivery against the providers' SDKs", () => {
  const body = { id: 'evt_1', object: 'event', type: 'charge.succeeded', data: { object: { id: 'ch_1' } } };

  it('Stripe: Stripe.webhooks.constructEvent accepts it', () => {
    const secret = whsec();
    const d = signedDelivery('stripe', body, { secret });
    const event = Stripe.webhooks.constructEvent(d.body, d.headers['stripe-signature']!, secret);
    expect(event.id).toBe('evt_1');
  });

  it("Svix and Standard Webhooks: each SDK's Webhook#verify accepts it", () => {
    const secret = whsec();
    const svix = signedDelivery('svix', body, { secret, id: 'msg_1' });
    expect(new SvixWebhook(secret).verify(svix.body, svix.headers)).toEqual(body);
    const standard = signedDelivery('standardWebhooks', body, { secret, id: 'msg_2' });
    expect(new StandardWebhook(secret).verify(standard.body, standard.headers)).toEqual(body);
  });

  it("GitHub: @octokit/webhooks-methods' verify accepts it", async () => {
    const d = signedDelivery('github', { action: 'opened' }, { secret: 'gh-secret', type: 'issues' });
    expect(await octokitVerify('gh-secret', d.body, d.headers['x-hub-signature-256']!)).toBe(true);
  });
});
