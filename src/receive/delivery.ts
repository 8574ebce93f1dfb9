import { InvalidDeliveryError } from '../errors.js';
import type { ResolvedOptions } from '../options.js';
import { bodyHash, parseBody } from '../payload.js';
import { type Delivery, normalizeHeaders } from './request.js';

/** A delivery whose headers and body passed validation. */
export interface ParsedDelivery {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly hash: string;
  readonly rawBody: Buffer;
  readonly body: unknown;
  readonly headers: Record<string, string>;
}

const PRINTABLE_ASCII = /^[\x20-\x7e]{1,255}$/;
// Any character but controls; Node hands header values over as latin1 strings.
const KEY = /^[^\x00-\x1f\x7f]{1,255}$/;
const SEQ = /^[1-9][0-9]{0,15}$/;

function single(
  raw: Delivery['headers'],
  headers: Record<string, string>,
  name: string,
  label: string,
): string | undefined {
  const direct = raw[name];
  if (Array.isArray(direct) && direct.length > 1) {
    throw new InvalidDeliveryError(label, `${label} must appear once`);
  }
  return headers[name];
}

/**
 * Validates a delivery against the wire contract (docs/outcomes.md) and hashes its body.
 * Throws InvalidDeliveryError naming the field; never touches the database.
 */
export function parseDelivery(
  delivery: Delivery,
  options: ResolvedOptions,
  idOverride?: string,
  /** The id a verified signature covers (Standard Webhooks' `webhook-id`), used when the id header is absent. */
  signedId?: string,
): ParsedDelivery {
  const rawBody = Buffer.isBuffer(delivery.rawBody)
    ? delivery.rawBody
    : Buffer.from(delivery.rawBody.buffer, delivery.rawBody.byteOffset, delivery.rawBody.byteLength);
  if (rawBody.length > options.maxBodyBytes) {
    throw new InvalidDeliveryError('body', `body is larger than ${options.maxBodyBytes} bytes`, 413);
  }
  const headers = normalizeHeaders(delivery.headers);
  const names = options.headers;
  const hash = bodyHash(rawBody);

  let id = idOverride ?? single(delivery.headers, headers, names.id, 'Idempotency-Key') ?? signedId;
  if (id === undefined) {
    if (!options.idFromBody) throw new InvalidDeliveryError(names.id, `${names.id} header is required`);
    id = `sha256:${hash}`;
  } else if (!PRINTABLE_ASCII.test(id)) {
    throw new InvalidDeliveryError(names.id, `${names.id} must be 1-255 printable ASCII characters`);
  }

  const keyHeader = single(delivery.headers, headers, names.key, names.key);
  const seqHeader = single(delivery.headers, headers, names.seq, names.seq);
  let key: string | null = null;
  let seq: number | null = null;
  if (keyHeader !== undefined) {
    if (!KEY.test(keyHeader))
      throw new InvalidDeliveryError(
        names.key,
        `${names.key} must be 1-255 characters, no control characters`,
      );
    if (seqHeader === undefined)
      throw new InvalidDeliveryError(names.seq, `${names.seq} is required when ${names.key} is present`);
    key = keyHeader;
  }
  if (seqHeader !== undefined) {
    if (keyHeader === undefined)
      throw new InvalidDeliveryError(names.key, `${names.seq} requires ${names.key}`);
    const n = SEQ.test(seqHeader) ? Number(seqHeader) : Number.NaN;
    if (!Number.isSafeInteger(n)) {
      throw new InvalidDeliveryError(
        names.seq,
        `${names.seq} must be a decimal integer from 1 to 9007199254740991`,
      );
    }
    seq = n;
  }

  const body = parseBody(rawBody, headers['content-type'], options.parse);
  return { id, key, seq, hash, rawBody, body, headers };
}
