// One signer per preset of `webhook-inbox/providers`, from the provider's documentation.
import { createHmac, randomUUID } from 'node:crypto';
import type { Provider, providers } from '../delivery/providers.js';

/** The presets of `webhook-inbox/providers`, by name. */
export type PresetName =
  | 'stripe'
  | 'github'
  | 'shopify'
  | 'svix'
  | 'standardWebhooks'
  | 'slack'
  | 'paddle'
  | 'gitlab';
// Every preset is signed here, and only presets (a new preset without a signer fails to compile).
const everyPreset: [PresetName, keyof typeof providers] extends [keyof typeof providers, PresetName]
  ? true
  : never = true;
void everyPreset;

/** A preset's name (`'stripe'`), or the preset itself (`stripe({ secret })`). */
export type SignedProvider = PresetName | Provider;

export interface SignedDeliveryOptions {
  /** The secret the inbox's preset was given (`whsec_…` for Stripe and Svix). */
  secret: string;
  /** The delivery id, for providers that send it in a header (Stripe, Slack, Paddle read the body's). @defaultValue a random UUID */
  id?: string;
  /**
   * The event type's header, for GitHub, Shopify and GitLab.
   * @defaultValue `'ping'`, `'orders/create'`, `'Push Hook'`
   */
  type?: string;
  /** When it was signed. @defaultValue now */
  timestamp?: Date;
}

/** What a provider would send: pass `headers` and `rawBody` to `inbox.receive`, or POST them. */
export interface SignedDelivery {
  readonly headers: Record<string, string>;
  readonly body: string;
  readonly rawBody: Buffer;
}

const hmac = (key: string | Buffer, text: string) => createHmac('sha256', key).update(text);

/**
 * A delivery of `body` (an object is sent as JSON) signed as `provider` signs it.
 *
 * ```ts
 * const { headers, rawBody } = signedDelivery('stripe', event, { secret: 'whsec_test' });
 * ```
 */
export function signedDelivery(
  provider: SignedProvider,
  body: unknown,
  options: SignedDeliveryOptions,
): SignedDelivery {
  const name = typeof provider === 'string' ? provider : provider.name;
  const text =
    typeof body === 'string' ? body : Buffer.isBuffer(body) ? body.toString() : JSON.stringify(body);
  const { secret } = options;
  const id = options.id ?? randomUUID();
  const at = options.timestamp ?? new Date();
  const ts = Math.floor(at.getTime() / 1000);
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  switch (name) {
    case 'stripe':
      headers['stripe-signature'] = `t=${ts},v1=${hmac(secret, `${ts}.${text}`).digest('hex')}`;
      break;
    case 'github':
      headers['x-github-delivery'] = id;
      headers['x-github-event'] = options.type ?? 'ping';
      headers['x-hub-signature-256'] = `sha256=${hmac(secret, text).digest('hex')}`;
      break;
    case 'shopify':
      headers['x-shopify-webhook-id'] = id;
      headers['x-shopify-event-id'] = id;
      headers['x-shopify-topic'] = options.type ?? 'orders/create';
      headers['x-shopify-triggered-at'] = at.toISOString();
      headers['x-shopify-hmac-sha256'] = hmac(secret, text).digest('base64');
      break;
    case 'svix':
    case 'standardWebhooks': {
      const key = Buffer.from(secret.startsWith('whsec_') ? secret.slice(6) : secret, 'base64');
      const prefix = name === 'svix' ? 'svix' : 'webhook';
      headers[`${prefix}-id`] = id;
      headers[`${prefix}-timestamp`] = String(ts);
      headers[`${prefix}-signature`] = `v1,${hmac(key, `${id}.${ts}.${text}`).digest('base64')}`;
      break;
    }
    case 'slack':
      headers['x-slack-request-timestamp'] = String(ts);
      headers['x-slack-signature'] = `v0=${hmac(secret, `v0:${ts}:${text}`).digest('hex')}`;
      break;
    case 'paddle':
      headers['paddle-signature'] = `ts=${ts};h1=${hmac(secret, `${ts}:${text}`).digest('hex')}`;
      break;
    case 'gitlab':
      headers['idempotency-key'] = id;
      headers['x-gitlab-event-uuid'] = id;
      headers['x-gitlab-event'] = options.type ?? 'Push Hook';
      headers['x-gitlab-token'] = secret;
      break;
    default:
      throw new TypeError(`webhook-inbox: signedDelivery knows no provider ${JSON.stringify(name)}`);
  }
  return { headers, body: text, rawBody: Buffer.from(text) };
}
