/** Signature verification on the raw bytes. Comparisons are constant-time; timestamps are checked both ways. */
import { createHash } from 'node:crypto';
import { InboxOptionsError, UnauthorizedDeliveryError } from '../errors.js';
import { HEADER_NAME } from './field-source.js';
import { jsonOf } from './payload.js';
import { type Delivery, normalizeHeaders, toBuffer } from './request.js';
import {
  checkTimestamp,
  hmac,
  malformed,
  mustMatch,
  required,
  secretList,
  strictBase64,
  strictHex,
  toleranceOf,
} from './signature-checks.js';

/** What a verifier sees: lower-case header names and the exact bytes received. */
export interface VerifiableDelivery {
  readonly headers: Readonly<Record<string, string>>;
  readonly rawBody: Buffer;
}

/** What a verifier may tell the inbox: the event id the signature covers. */
export interface VerifiedDelivery {
  /** The event id the signature covers: a disagreeing id header is refused. */
  readonly id?: string;
}

/**
 * Checks a delivery's signature: throw `UnauthorizedDeliveryError` (naming the header) to answer 401,
 * return to accept. Any other error answers 503 (the sender retries).
 */
export interface Verify {
  (
    delivery: VerifiableDelivery,
    // biome-ignore lint/suspicious/noConfusingVoidType: an async hook that returns nothing is Promise<void>.
  ): void | VerifiedDelivery | Promise<void | VerifiedDelivery>;
  /** The request headers this verifier reads a secret or a signature from: never stored. */
  readonly secretHeaders?: readonly string[];
}

function declaring(secretHeaders: readonly string[], verify: Verify): Verify {
  return Object.assign(verify, { secretHeaders: Object.freeze([...secretHeaders]) });
}

/** One secret, or several while a secret is being rotated (any of them may have signed). */
export type Secrets = string | Buffer | readonly (string | Buffer)[];

/**
 * Standard Webhooks (Svix and others): `webhook-signature` `v1,<base64>` entries over
 * `${id}.${timestamp}.${body}`, keyed by the base64 secret after `whsec_`.
 */
export function standardWebhooks(options: {
  /** `whsec_…` (base64 after the prefix) or the raw key bytes; several while rotating. */
  secret: Secrets;
  /** How far the timestamp may be from now, either way. @defaultValue 300 */
  toleranceSeconds?: number;
  /** `webhook-*`, `svix-*`, or `'either'` (`svix-*` when `svix-id` is present). @defaultValue 'webhook' */
  headers?: 'webhook' | 'svix' | 'either';
}): Verify {
  const keys = secretList(options?.secret, 'verify.secret').map((s) => {
    if (Buffer.isBuffer(s) && s.length > 0) return s;
    if (typeof s !== 'string') throw new InboxOptionsError('verify.secret', 'must be a string or a Buffer');
    const b64 = s.startsWith('whsec_') ? s.slice(6) : s;
    const key = Buffer.from(b64, 'base64');
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64) || key.length === 0) {
      throw new InboxOptionsError('verify.secret', 'must be "whsec_" followed by base64');
    }
    return key;
  });
  const tolerance = toleranceOf(options.toleranceSeconds);
  const family = options.headers ?? 'webhook';
  if (family !== 'webhook' && family !== 'svix' && family !== 'either') {
    throw new InboxOptionsError('verify.headers', 'must be "webhook", "svix" or "either"');
  }
  const declared = family === 'either' ? ['webhook-signature', 'svix-signature'] : [`${family}-signature`];
  return declaring(declared, (d) => {
    const prefix = family === 'either' ? (d.headers['svix-id'] !== undefined ? 'svix' : 'webhook') : family;
    const signatures = required(d, `${prefix}-signature`);
    const id = required(d, `${prefix}-id`);
    const timestamp = required(d, `${prefix}-timestamp`);
    checkTimestamp(timestamp, `${prefix}-timestamp`, tolerance);
    // `v1a,` (ed25519) is not supported and never matches.
    const given = signatures
      .split(' ')
      .filter((s) => s.startsWith('v1,'))
      .map((s) => strictBase64(s.slice(3)) ?? malformed(`${prefix}-signature`, 'v1,<base64>'));
    const expected = keys.map((key) => hmac(key, `${id}.${timestamp}.`, d.rawBody));
    mustMatch(`${prefix}-signature`, given, expected);
    return { id };
  });
}

/** The `header` option of a verifier, lower-cased. */
function headerName(header: unknown): string {
  if (typeof header !== 'string' || !HEADER_NAME.test(header)) {
    throw new InboxOptionsError('verify.header', 'must be an HTTP header name');
  }
  return header.toLowerCase();
}

function plainSecrets(secret: unknown): (string | Buffer)[] {
  return secretList(secret, 'verify.secret').map((s) => {
    if ((typeof s !== 'string' && !Buffer.isBuffer(s)) || s.length === 0) {
      throw new InboxOptionsError('verify.secret', 'must be a non-empty string or Buffer');
    }
    return s as string | Buffer;
  });
}

/** Slack: `X-Slack-Signature: v0=<hex>` over `v0:${timestamp}:${body}`. */
export function slackSignature(options: { secret: Secrets; toleranceSeconds?: number }): Verify {
  const keys = plainSecrets(options?.secret);
  const tolerance = toleranceOf(options.toleranceSeconds);
  return declaring(['x-slack-signature'], (d) => {
    const header = required(d, 'x-slack-signature');
    const timestamp = required(d, 'x-slack-request-timestamp');
    checkTimestamp(timestamp, 'x-slack-request-timestamp', tolerance);
    const given = strictHex(header.startsWith('v0=') ? header.slice(3) : '');
    if (given === undefined) {
      throw new UnauthorizedDeliveryError(
        'x-slack-signature',
        'x-slack-signature must be v0=<hex HMAC-SHA256>',
      );
    }
    const expected = keys.map((key) => hmac(key, `v0:${timestamp}:`, d.rawBody));
    mustMatch('x-slack-signature', [given], expected);
  });
}

/** Stripe's and Paddle's `name=value` list of a timestamp and hex HMAC-SHA256 digests. */
function checkSignedItems(
  d: VerifiableDelivery,
  header: string,
  form: { separator: string; ts: string; sig: string; join: string },
  keys: readonly (string | Buffer)[],
  tolerance: number,
): void {
  let ts: string | undefined;
  const given: Buffer[] = [];
  for (const item of required(d, header).split(form.separator)) {
    const eq = item.indexOf('=');
    const name = item.slice(0, eq).trim();
    const value = item.slice(eq + 1).trim();
    if (name === form.ts) ts = value;
    else if (name === form.sig) given.push(strictHex(value) ?? malformed(header, `${form.sig}=<hex>`));
  }
  if (ts === undefined || given.length === 0) {
    throw new UnauthorizedDeliveryError(header, `${header} must carry ${form.ts}= and ${form.sig}=`);
  }
  checkTimestamp(ts, header, tolerance);
  const expected = keys.map((key) => hmac(key, `${ts}${form.join}`, d.rawBody));
  mustMatch(header, given, expected);
}

/** Paddle Billing: `Paddle-Signature: ts=<seconds>;h1=<hex>` over `${ts}:${body}`; 5 seconds' tolerance. */
export function paddleSignature(options: { secret: Secrets; toleranceSeconds?: number }): Verify {
  const keys = plainSecrets(options?.secret);
  const tolerance = toleranceOf(options.toleranceSeconds, 5);
  const form = { separator: ';', ts: 'ts', sig: 'h1', join: ':' };
  return declaring(['paddle-signature'], (d) =>
    checkSignedItems(d, 'paddle-signature', form, keys, tolerance),
  );
}

/** A shared token in a header (GitLab), compared in constant time; it covers nothing. */
export function headerToken(options: { header: string; secret: Secrets }): Verify {
  const name = headerName(options?.header);
  // Digests of equal length: the comparison leaks neither the token nor its length.
  const digest = (v: string | Buffer) => createHash('sha256').update(v).digest();
  const expected = plainSecrets(options.secret).map(digest);
  return declaring([name], (d) =>
    mustMatch(name, [digest(Buffer.from(required(d, name), 'latin1'))], expected),
  );
}

/** Stripe: `Stripe-Signature: t=<seconds>,v1=<hex>` over `${t}.${body}`, keyed by the endpoint secret. */
export function stripeSignature(options: {
  /** The endpoint's signing secret, `whsec_…`; several while rolling it. */
  secret: string | readonly string[];
  /** How far `t` may be from now, either way. @defaultValue 300 */
  toleranceSeconds?: number;
}): Verify {
  const secrets = secretList(options?.secret, 'verify.secret').map((s) => {
    if (typeof s !== 'string' || s === '') throw new InboxOptionsError('verify.secret', 'must be a string');
    return s;
  });
  const tolerance = toleranceOf(options.toleranceSeconds);
  const form = { separator: ',', ts: 't', sig: 'v1', join: '.' };
  return declaring(['stripe-signature'], (d) => {
    checkSignedItems(d, 'stripe-signature', form, secrets, tolerance);
    const id = (jsonOf(d.rawBody) as { id?: unknown } | null | undefined)?.id;
    return typeof id === 'string' && id !== '' ? { id } : undefined;
  });
}

/**
 * An HMAC-SHA256 of the raw body in one header (GitHub, Shopify); it covers no id, so prefer
 * `idFromBody`.
 */
export function hmacSignature(options: {
  /** The header carrying the signature (case-insensitive). */
  header: string;
  /** The shared secret (used as the HMAC key's bytes); several while rotating. */
  secret: Secrets;
  /** How the digest is written. @defaultValue 'hex' */
  encoding?: 'hex' | 'base64';
  /** Text before the digest, e.g. `sha256=`. @defaultValue '' */
  prefix?: string;
}): Verify {
  const name = headerName(options?.header);
  const keys = plainSecrets(options.secret);
  const encoding = options.encoding ?? 'hex';
  if (encoding !== 'hex' && encoding !== 'base64') {
    throw new InboxOptionsError('verify.encoding', 'must be "hex" or "base64"');
  }
  const prefix = options.prefix ?? '';
  if (typeof prefix !== 'string') throw new InboxOptionsError('verify.prefix', 'must be a string');
  return declaring([name], (d) => {
    const value = required(d, name);
    const digest = value.startsWith(prefix) ? value.slice(prefix.length).trim() : undefined;
    const given =
      digest === undefined ? undefined : encoding === 'hex' ? strictHex(digest) : strictBase64(digest);
    if (given === undefined) {
      throw new UnauthorizedDeliveryError(name, `${name} must be ${prefix}<${encoding} HMAC-SHA256>`);
    }
    const expected = keys.map((key) => hmac(key, d.rawBody));
    mustMatch(name, [given], expected);
  });
}

/** Runs `verify` on a delivery as the inbox received it. */
export async function verifyDelivery(verify: Verify, delivery: Delivery): Promise<VerifiedDelivery> {
  const rawBody = toBuffer(delivery.rawBody);
  return (await verify({ headers: normalizeHeaders(delivery.headers), rawBody })) ?? {};
}
