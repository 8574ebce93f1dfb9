/** An event's payload: its hash (the body's identity for duplicates), the headers kept, its parsing. */
import * as crypto from 'node:crypto';
import { InvalidDeliveryError } from '../errors.js';

/**
 * Headers that carry a credential or a signature: never stored or shown, as a stored signature lets
 * whoever reads the table replay the delivery (a stored event is never verified again).
 */
export const SECRET_HEADERS: readonly string[] = Object.freeze([
  'authorization',
  'proxy-authorization',
  'cookie',
  'x-gitlab-token',
  'stripe-signature',
  'x-hub-signature',
  'x-hub-signature-256',
  'x-shopify-hmac-sha256',
  'webhook-signature',
  'svix-signature',
  'x-slack-signature',
  'paddle-signature',
]);

export type ParseMode = 'auto' | 'json' | 'raw';

export function secretHeaderSet(...more: ReadonlyArray<readonly string[] | undefined>): ReadonlySet<string> {
  const set = new Set(SECRET_HEADERS);
  for (const list of more) for (const name of list ?? []) set.add(name.toLowerCase());
  return set;
}

/** The headers stored with an event that may be applied later or shown: all but the secret ones. */
export function storableHeaders(
  headers: Record<string, string>,
  secret: ReadonlySet<string>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in headers) if (!secret.has(name.toLowerCase())) out[name] = headers[name];
  return out;
}

/** `crypto.hash` (Node 20.12+): one call, no Hash object, for what is hashed once per delivery. */
const oneShot = (crypto as { hash?: (algorithm: string, data: Uint8Array, encoding: 'hex') => string }).hash;

export function bodyHash(rawBody: Uint8Array): string {
  if (oneShot) return oneShot('sha256', rawBody, 'hex');
  return crypto.createHash('sha256').update(rawBody).digest('hex');
}

function isJsonContentType(contentType: string | undefined): boolean {
  if (!contentType) return false;
  if (contentType === 'application/json') return true;
  const type = contentType.split(';', 1)[0].trim().toLowerCase();
  return type === 'application/json' || type.endsWith('+json');
}

/** Whether {@link parseBody} parses a body with this content type as JSON. */
export function readsAsJson(contentType: string | undefined, parse: ParseMode): boolean {
  if (parse === 'raw') return false;
  if (contentType === undefined) return parse === 'json';
  return isJsonContentType(contentType);
}

/** Parses the body the way option `parse` says; also used again when a held event is applied. */
export function parseBody(rawBody: Buffer, contentType: string | undefined, parse: ParseMode): unknown {
  if (parse === 'json' && contentType !== undefined && !isJsonContentType(contentType)) {
    throw new InvalidDeliveryError('content-type', 'content-type must be application/json');
  }
  if (!readsAsJson(contentType, parse)) return rawBody;
  const json = jsonOf(rawBody);
  if (json === undefined) throw new InvalidDeliveryError('body', 'body is not valid JSON');
  return json;
}

/** Undefined when the body is not JSON. */
export function jsonOf(rawBody: Buffer): unknown {
  try {
    return JSON.parse(rawBody.toString('utf8'));
  } catch {
    return undefined;
  }
}
