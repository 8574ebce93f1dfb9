/** The checks every built-in verifier is made of. */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { InboxOptionsError, UnauthorizedDeliveryError } from '../errors.js';

const DEFAULT_TOLERANCE_SECONDS = 300;

export function secretList(secret: unknown, option: string): unknown[] {
  const list = Array.isArray(secret) ? secret : [secret];
  // The usual cause: `secret: process.env.WEBHOOK_SECRET` with the variable unset (or empty).
  for (const s of list) {
    if (s === undefined || s === null || s === '') {
      throw new InboxOptionsError(
        option,
        `got ${s === '' ? 'an empty string' : String(s)}: is the environment variable that holds the secret set (e.g. STRIPE_WEBHOOK_SECRET for stripe({ secret: process.env.STRIPE_WEBHOOK_SECRET }))?`,
      );
    }
  }
  if (list.length === 0) throw new InboxOptionsError(option, 'must name at least one secret');
  return list;
}

/** A verifier's `toleranceSeconds`. */
export function toleranceOf(value: unknown, fallback = DEFAULT_TOLERANCE_SECONDS): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 86_400) {
    throw new InboxOptionsError(
      'verify.toleranceSeconds',
      `must be an integer number of seconds from 1 to 86400`,
    );
  }
  return value;
}

export function required(d: { readonly headers: Readonly<Record<string, string>> }, name: string): string {
  const value = d.headers[name];
  if (value === undefined || value === '') {
    throw new UnauthorizedDeliveryError(name, `${name} header is required`);
  }
  return value;
}

/** Unix seconds from a header; 401 when malformed or outside `tolerance` of now, either way. */
export function checkTimestamp(raw: string, name: string, tolerance: number): number {
  if (!/^[0-9]{1,12}$/.test(raw)) {
    throw new UnauthorizedDeliveryError(name, `${name} must be a Unix timestamp in seconds`);
  }
  const seconds = Number(raw);
  const now = Math.floor(Date.now() / 1000);
  if (seconds < now - tolerance) {
    throw new UnauthorizedDeliveryError(name, `${name} is more than ${tolerance} seconds old`);
  }
  if (seconds > now + tolerance) {
    throw new UnauthorizedDeliveryError(name, `${name} is more than ${tolerance} seconds in the future`);
  }
  return seconds;
}

/** 401 unless one of `given` is one of `expected`, every pair compared (in constant time). */
export function mustMatch(name: string, given: readonly Buffer[], expected: readonly Buffer[]): void {
  let found = false;
  for (const g of given) {
    for (const e of expected) {
      // Lengths are public (a digest's size); only equal-length buffers are compared.
      if (g.length === e.length && timingSafeEqual(g, e)) found = true;
    }
  }
  if (!found) throw new UnauthorizedDeliveryError(name, `${name} does not match`);
}

/** Canonical base64 only: Node's decoder would let `sig!!` and `sig` match one signature. */
export function strictBase64(text: string): Buffer | undefined {
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text) || text.length % 4 !== 0) return undefined;
  const bytes = Buffer.from(text, 'base64');
  return bytes.toString('base64') === text ? bytes : undefined;
}

/** A hex HMAC-SHA256 (64 digits) only: `Buffer.from(hex, 'hex')` drops an odd last digit, so `<sig>0` passed. */
export function strictHex(text: string): Buffer | undefined {
  return /^[0-9a-f]{64}$/i.test(text) ? Buffer.from(text, 'hex') : undefined;
}

/** A non-canonical entry refuses the whole header: what the sender did not write was not written by it. */
export function malformed(name: string, form: string): never {
  throw new UnauthorizedDeliveryError(
    name,
    `${name} must carry ${form} HMAC-SHA256 signatures, canonically encoded`,
  );
}

export function hmac(key: Buffer | string, ...parts: (string | Buffer)[]): Buffer {
  const h = createHmac('sha256', key);
  for (const part of parts) h.update(part);
  return h.digest();
}
