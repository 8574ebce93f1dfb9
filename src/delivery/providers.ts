/**
 * Provider presets (`webhook-inbox/providers`): how each provider's signature is verified and where
 * its event id, type and object come from. Every part can be overridden.
 *
 * ```ts
 * const inbox = createInbox({ db, provider: stripe({ secret: process.env.STRIPE_WEBHOOK_SECRET }), handle });
 * ```
 */
import { InboxOptionsError } from '../errors.js';
import type { FieldSource } from './field-source.js';
import {
  headerToken,
  hmacSignature,
  paddleSignature,
  type Secrets,
  slackSignature,
  standardWebhooks as standardWebhooksSignature,
  stripeSignature,
  type Verify,
} from './verify.js';

/** What a preset bundles; pass it as the inbox's `provider` option. */
export interface Provider {
  readonly name: string;
  readonly verify: Verify;
  /** The inbox's `fields.id`. */
  readonly id: FieldSource;
  /** Where `event.type` is. */
  readonly type: FieldSource | undefined;
  /** Headers added to a `RejectEvent`'s 422 that tell the provider not to retry. */
  readonly rejectHeaders: Readonly<Record<string, string>>;
  /** The object an event is about and its version, for latest-wins ordering; false when off. */
  readonly order: { readonly key: FieldSource; readonly version: FieldSource } | false;
  /** The request headers that carry the provider's secret or signature: never stored. */
  readonly secretHeaders: readonly string[];
  /** The tenant an event belongs to (the inbox's `groups.by`). */
  readonly group?: FieldSource;
}

/** Options every preset takes: the secret(s), and overrides of what the preset reads (`id`, `type`, …). */
export interface PresetOptions {
  /** The signing secret; several while rotating (any of them may have signed). */
  secret: Secrets;
  id?: FieldSource;
  type?: FieldSource;
  /** false: no ordering. */
  order?: { key: FieldSource; version: FieldSource } | false;
  group?: FieldSource;
}

/** Options of presets whose signature carries a timestamp. */
export interface TimedPresetOptions extends PresetOptions {
  /** How far the signed timestamp may be from now, either way, in seconds. */
  toleranceSeconds?: number;
}

function preset(
  name: string,
  options: PresetOptions | undefined,
  verify: (o: PresetOptions) => Verify,
  defaults: Omit<Provider, 'name' | 'verify' | 'rejectHeaders' | 'secretHeaders'> & {
    rejectHeaders?: Record<string, string>;
  },
): Provider {
  if (options === null || typeof options !== 'object') {
    throw new InboxOptionsError('provider', `${name}() takes { secret }`);
  }
  if (options.order !== undefined && options.order !== false && typeof options.order !== 'object') {
    throw new InboxOptionsError('provider.order', 'must be { key, version } or false');
  }
  const verifier = verify(options);
  return {
    name,
    verify: verifier,
    secretHeaders: verifier.secretHeaders ?? [],
    id: options.id ?? defaults.id,
    type: options.type ?? defaults.type,
    order: options.order ?? defaults.order,
    group: options.group ?? defaults.group,
    rejectHeaders: Object.freeze({ ...defaults.rejectHeaders }),
  };
}

/** A member of a parsed JSON body, or undefined. */
function member(value: unknown, name: string): unknown {
  return value !== null && typeof value === 'object' && Object.hasOwn(value, name)
    ? (value as Record<string, unknown>)[name]
    : undefined;
}

/**
 * Stripe: `Stripe-Signature` (5 minutes' tolerance); id = the body's `id`; type = `type`; the object is
 * `data.object.id`, versioned by `created`; group = the Connect `account`.
 */
export function stripe(options: TimedPresetOptions): Provider {
  return preset('stripe', options, (o) => stripeSignature(o as TimedPresetOptions & { secret: string }), {
    id: '/id',
    type: '/type',
    order: { key: '/data/object/id', version: '/created' },
    group: '/account',
  });
}

/**
 * GitHub: `X-Hub-Signature-256`; id = `X-GitHub-Delivery`; type = `X-GitHub-Event`, joined with the
 * body's `action` as Octokit names them (`issues.opened`); group = `installation.id`. No ordering.
 */
export function github(options: PresetOptions): Provider {
  return preset(
    'github',
    options,
    (o) => hmacSignature({ header: 'x-hub-signature-256', prefix: 'sha256=', secret: o.secret }),
    {
      id: 'x-github-delivery',
      type: (d) => {
        const event = d.headers['x-github-event'];
        const action = member(d.body, 'action');
        return event !== undefined && typeof action === 'string' ? `${event}.${action}` : event;
      },
      order: false,
      group: '/installation/id',
    },
  );
}

/**
 * Shopify: `X-Shopify-Hmac-Sha256`; id = `X-Shopify-Webhook-Id`; type = `X-Shopify-Topic`; the object
 * is the body's `id`, versioned by `X-Shopify-Triggered-At`; group = `X-Shopify-Shop-Domain`.
 */
export function shopify(options: PresetOptions): Provider {
  return preset(
    'shopify',
    options,
    (o) => hmacSignature({ header: 'x-shopify-hmac-sha256', encoding: 'base64', secret: o.secret }),
    {
      id: 'x-shopify-webhook-id',
      type: 'x-shopify-topic',
      order: { key: '/id', version: 'x-shopify-triggered-at' },
      group: 'x-shopify-shop-domain',
    },
  );
}

/**
 * Svix and every Standard Webhooks sender (Clerk, Resend, …): `svix-*` or `webhook-*` headers, `v1`
 * signatures; id = the signed id; type = the body's `type`. No ordering. A `RejectEvent` answers
 * `webhook-delivery: abort-message`, so Svix stops retrying.
 */
export function svix(options: TimedPresetOptions): Provider {
  return preset(
    'svix',
    options,
    (o) => standardWebhooksSignature({ ...(o as TimedPresetOptions), headers: 'either' }),
    {
      id: (d) => d.headers['svix-id'] ?? d.headers['webhook-id'],
      type: '/type',
      order: false,
      rejectHeaders: { 'webhook-delivery': 'abort-message' },
    },
  );
}

/** The same preset as `svix`: both header families. */
export function standardWebhooks(options: TimedPresetOptions): Provider {
  return { ...svix(options), name: 'standardWebhooks' };
}

/**
 * Slack (Events API): `X-Slack-Signature` `v0`, 5 minutes' tolerance; id = `event_id`; type = `event.type`,
 * else the envelope's `type`. A `RejectEvent` answers `X-Slack-No-Retry: 1`. Slack wants an answer within
 * 3 seconds: pair it with `mode: 'deferred'`.
 */
export function slack(options: TimedPresetOptions): Provider {
  return preset('slack', options, (o) => slackSignature(o as TimedPresetOptions), {
    id: '/event_id',
    type: (d) => {
      const inner = member(member(d.body, 'event'), 'type');
      return (inner ?? member(d.body, 'type')) as string | undefined;
    },
    order: false,
    rejectHeaders: { 'x-slack-no-retry': '1' },
  });
}

/**
 * Paddle Billing: `Paddle-Signature` (5 seconds' tolerance); id = `event_id`; type = `event_type`; the
 * object is `data.id`, versioned by `occurred_at`.
 */
export function paddle(options: TimedPresetOptions): Provider {
  return preset('paddle', options, (o) => paddleSignature(o as TimedPresetOptions), {
    id: '/event_id',
    type: '/event_type',
    order: { key: '/data/id', version: '/occurred_at' },
  });
}

/**
 * GitLab: `X-Gitlab-Token` (a shared token; it signs nothing); id = `Idempotency-Key`, else
 * `X-Gitlab-Event-UUID`; type = `object_kind`, else `X-Gitlab-Event`. No ordering.
 */
export function gitlab(options: PresetOptions): Provider {
  return preset('gitlab', options, (o) => headerToken({ header: 'x-gitlab-token', secret: o.secret }), {
    id: (d) => d.headers['idempotency-key'] ?? d.headers['x-gitlab-event-uuid'],
    type: (d) => (member(d.body, 'object_kind') ?? d.headers['x-gitlab-event']) as string | undefined,
    order: false,
  });
}

/** Every preset by name: what the ledger example's `PROVIDER` picks from. */
export const providers = {
  stripe,
  github,
  shopify,
  svix,
  standardWebhooks,
  slack,
  paddle,
  gitlab,
} as const;
