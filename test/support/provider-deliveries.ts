/**
 * A signed delivery of each provider preset, signed as the provider signs it: by its own SDK
 * where one signs (stripe's generateTestHeaderString, @octokit/webhooks-methods' sign, svix's
 * and standardwebhooks' Webhook#sign), else by an independent HMAC per its documentation. The
 * event's type goes where the provider puts it. Shared by the preset tests and the routing tests.
 */
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { sign as octokitSign } from '@octokit/webhooks-methods';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { Webhook as SvixWebhook } from 'svix';
import type { providers } from '../../src/delivery/providers.js';

export const now = () => Math.floor(Date.now() / 1000);
export const hex = (key: string, text: string) => createHmac('sha256', key).update(text).digest('hex');
export const whsec = () => `whsec_${randomBytes(24).toString('base64')}`;

/** A delivery of one event, signed at a time, with a secret. */
export interface Signed {
  headers: Record<string, string>;
  body: string;
}

export interface Case {
  readonly provider: keyof typeof providers;
  readonly secret: string;
  /** The type its events have unless told (`event.type` as the preset reads it). */
  readonly type: string;
  /**
   * A new event of `type` (the case's own unless given), placed where the provider puts it: its
   * id, and its delivery signed with `secret` at `ts` (Unix seconds).
   */
  event(type?: string): { id: string; deliver(secret: string, ts: number): Promise<Signed> | Signed };
  /** The header whose absence or mismatch is the 401. */
  readonly signatureHeader: string;
  /** Where the provider signs a timestamp: how old is too old. */
  readonly staleSeconds?: number;
  /** GitLab's token covers nothing: a changed body cannot be told from another event. */
  readonly unsignedBody?: true;
  /**
   * The valid signature header written in an encoding the verifier must refuse (an odd-length
   * hex digest, a non-canonical base64 one) that a lenient decoder reads as the same bytes.
   * GitLab's token has no encoding.
   */
  malform?(value: string): string;
}

/** A Standard Webhooks `v1,<base64>` entry with its base64 made non-canonical. */
const nonCanonicalV1 = (value: string) => `v1,${nonCanonicalBase64(value.slice(3))}`;

/** `<hex>0`: Buffer.from(hex, 'hex') drops the odd digit and decodes the valid signature. */
const oddHex = (value: string) => `${value}0`;

/**
 * The same bytes in base64 that is not canonical: the unused low bits of the last digit before
 * `=` set, which Node's decoder ignores.
 */
function nonCanonicalBase64(b64: string): string {
  const digits = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  const at = b64.indexOf('=') - 1;
  const changed = digits[digits.indexOf(b64[at]) ^ 1];
  const malformed = b64.slice(0, at) + changed + b64.slice(at + 1);
  if (!Buffer.from(malformed, 'base64').equals(Buffer.from(b64, 'base64'))) {
    throw new Error(`${malformed} does not decode as ${b64} does`);
  }
  return malformed;
}

export const cases: Case[] = [
  {
    provider: 'stripe',
    type: 'payment_intent.succeeded',
    secret: `whsec_${randomBytes(16).toString('hex')}`,
    signatureHeader: 'stripe-signature',
    malform: oddHex,
    staleSeconds: 600,
    event(this: Case, type = this.type) {
      const id = `evt_${randomBytes(8).toString('hex')}`;
      const body = JSON.stringify({
        id,
        object: 'event',
        type,
        created: now(),
        amount: 5,
        data: { object: { id: `pi_${randomBytes(6).toString('hex')}`, object: 'payment_intent' } },
      });
      return {
        id,
        deliver: (secret, timestamp) => ({
          body,
          headers: {
            'stripe-signature': Stripe.webhooks.generateTestHeaderString({
              payload: body,
              secret,
              timestamp,
            }),
          },
        }),
      };
    },
  },
  {
    provider: 'github',
    type: 'issues.opened',
    secret: 'github-secret',
    signatureHeader: 'x-hub-signature-256',
    malform: oddHex,
    event(this: Case, type = this.type) {
      const id = randomUUID();
      // GitHub names the event in a header and the action in the body: `issues` + `opened`.
      const [event, action] = type.split('.');
      const body = JSON.stringify({ ...(action ? { action } : {}), ref: 'refs/heads/main', amount: 5 });
      return {
        id,
        deliver: async (secret) => ({
          body,
          headers: {
            'x-github-delivery': id,
            'x-github-event': event!,
            'x-hub-signature-256': await octokitSign(secret, body),
          },
        }),
      };
    },
  },
  {
    provider: 'shopify',
    type: 'orders/updated',
    secret: 'shopify-secret',
    signatureHeader: 'x-shopify-hmac-sha256',
    malform: nonCanonicalBase64,
    event(this: Case, type = this.type) {
      const id = randomUUID();
      const body = JSON.stringify({ id: 820982911946154500, updated_at: '2026-01-01T00:00:00Z', amount: 5 });
      return {
        id,
        // Shopify publishes no SDK signer: base64 HMAC-SHA256 of the body, as documented.
        deliver: (secret) => ({
          body,
          headers: {
            'x-shopify-webhook-id': id,
            'x-shopify-event-id': randomUUID(),
            'x-shopify-topic': type,
            'x-shopify-triggered-at': new Date().toISOString(),
            'x-shopify-hmac-sha256': createHmac('sha256', secret).update(body).digest('base64'),
          },
        }),
      };
    },
  },
  {
    provider: 'svix',
    type: 'user.created',
    secret: whsec(),
    signatureHeader: 'svix-signature',
    malform: nonCanonicalV1,
    staleSeconds: 600,
    event(this: Case, type = this.type) {
      const id = `msg_${randomBytes(8).toString('hex')}`;
      const body = JSON.stringify({ type, data: { id: 'user_1' }, amount: 5 });
      return {
        id,
        deliver: (secret, ts) => ({
          body,
          headers: {
            'svix-id': id,
            'svix-timestamp': String(ts),
            'svix-signature': new SvixWebhook(secret).sign(id, new Date(ts * 1000), body),
          },
        }),
      };
    },
  },
  {
    provider: 'standardWebhooks',
    type: 'invoice.paid',
    secret: whsec(),
    signatureHeader: 'webhook-signature',
    malform: nonCanonicalV1,
    staleSeconds: 600,
    event(this: Case, type = this.type) {
      const id = `msg_${randomBytes(8).toString('hex')}`;
      const body = JSON.stringify({ type, amount: 5 });
      return {
        id,
        deliver: (secret, ts) => ({
          body,
          headers: {
            'webhook-id': id,
            'webhook-timestamp': String(ts),
            'webhook-signature': new StandardWebhook(secret).sign(id, new Date(ts * 1000), body),
          },
        }),
      };
    },
  },
  {
    provider: 'slack',
    type: 'app_mention',
    secret: randomBytes(16).toString('hex'),
    signatureHeader: 'x-slack-signature',
    malform: oddHex,
    staleSeconds: 600,
    event(this: Case, type = this.type) {
      const id = `Ev${randomBytes(5).toString('hex').toUpperCase()}`;
      const body = JSON.stringify({
        type: 'event_callback',
        event_id: id,
        event: { type },
        amount: 5,
      });
      return {
        id,
        // Slack publishes no signer: `v0=` + hex HMAC of `v0:{timestamp}:{body}`, as documented.
        deliver: (secret, ts) => ({
          body,
          headers: {
            'x-slack-request-timestamp': String(ts),
            'x-slack-signature': `v0=${hex(secret, `v0:${ts}:${body}`)}`,
          },
        }),
      };
    },
  },
  {
    provider: 'paddle',
    type: 'transaction.completed',
    secret: `pdl_ntfset_${randomBytes(12).toString('hex')}`,
    signatureHeader: 'paddle-signature',
    malform: oddHex,
    staleSeconds: 60,
    event(this: Case, type = this.type) {
      const id = `evt_${randomBytes(8).toString('hex')}`;
      const body = JSON.stringify({
        event_id: id,
        event_type: type,
        occurred_at: new Date().toISOString(),
        data: { id: 'txn_1' },
        amount: 5,
      });
      return {
        id,
        // Paddle's signer lives in its SDK; by its documentation: hex HMAC of `${ts}:${body}`.
        deliver: (secret, ts) => ({
          body,
          headers: { 'paddle-signature': `ts=${ts};h1=${hex(secret, `${ts}:${body}`)}` },
        }),
      };
    },
  },
  {
    provider: 'gitlab',
    type: 'push',
    secret: 'gitlab-token',
    unsignedBody: true,
    signatureHeader: 'x-gitlab-token',
    event(this: Case, type = this.type) {
      const id = randomUUID();
      const body = JSON.stringify({ object_kind: type, amount: 5 });
      return {
        id,
        deliver: (secret) => ({
          body,
          headers: {
            'idempotency-key': id,
            'x-gitlab-event-uuid': randomUUID(),
            'x-gitlab-event': 'Push Hook',
            'x-gitlab-token': secret,
          },
        }),
      };
    },
  },
];
