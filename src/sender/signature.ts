import { createHmac } from 'node:crypto';

/** Standard Webhooks: every attempt is signed afresh (receivers reject timestamps a few minutes old). */
export function decodeSecret(secret: string): Buffer {
  if (!secret.startsWith('whsec_')) throw new Error('must start with "whsec_"');
  const encoded = secret.slice('whsec_'.length);
  if (encoded.length === 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) {
    throw new Error('must be "whsec_" followed by the base64 of the key');
  }
  return Buffer.from(encoded, 'base64');
}

/** `v1,` and the base64 HMAC-SHA256 of `${id}.${timestamp}.${body}`. */
export function sign(key: Buffer, id: string, timestampSeconds: number, body: Uint8Array): string {
  const mac = createHmac('sha256', key);
  mac.update(`${id}.${timestampSeconds}.`);
  mac.update(body);
  return `v1,${mac.digest('base64')}`;
}

/** The three Standard Webhooks headers; several keys (a rotation) give one `v1,…` each. */
export function signatureHeaders(
  keys: Buffer | readonly Buffer[],
  id: string,
  timestampSeconds: number,
  body: Uint8Array,
): Record<string, string> {
  const list = Array.isArray(keys) ? keys : [keys as Buffer];
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestampSeconds),
    'webhook-signature': list.map((key) => sign(key, id, timestampSeconds, body)).join(' '),
  };
}
