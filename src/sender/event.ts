import { randomUUID } from 'node:crypto';
import { InboxError } from '../errors.js';
import { HEADER_NAME } from '../options/option-checks.js';
import type { NewEvent } from './store.js';

/** One event to send. Give `body` (sent as JSON) or `rawBody` (sent as is). */
export interface SenderEvent {
  /** The idempotency key, stable across retries. @defaultValue a random UUID */
  id?: string;
  /** Events of one key are delivered one at a time, in seq order. */
  key?: string;
  /** Place in the key's sequence; must be above the key's last seq. @defaultValue the key's next (1, 2, 3, …) */
  seq?: number;
  /** A JSON value, serialised once: every retry sends the same bytes. */
  body?: unknown;
  /** Bytes (or a string) sent exactly as given; copied, so the caller may reuse its buffer. */
  rawBody?: string | Uint8Array;
  /** @defaultValue 'application/json' */
  contentType?: string;
  /** Extra request headers (not the protocol's own, not hop-by-hop ones). */
  headers?: Record<string, string>;
}

/** An event given to `send`/`enqueue` that cannot be sent as it is. */
export class InvalidEventError extends InboxError {
  override name = 'InvalidEventError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`webhook-inbox/sender: event.${field} ${message}`, 'invalid-event', 400);
  }
}

export function seqNotAfterError(seq: number, last: number): InvalidEventError {
  return new InvalidEventError(
    'seq',
    `${seq} is not above the key's last seq ${last}: it would be delivered out of order (give no seq to take the next)`,
  );
}

const ID = /^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$/;
/** Headers the HTTP client manages itself (and every `proxy-*`): they would fail every attempt. */
const HOP_BY_HOP = new Set(
  'connection keep-alive transfer-encoding te trailer upgrade expect host'.split(' '),
);

/** `protocolHeaders`: the names the sender sets itself. */
export function prepareEvent(event: SenderEvent | undefined, protocolHeaders: ReadonlySet<string>): NewEvent {
  if (!event || typeof event !== 'object') throw new InvalidEventError('', 'must be an object');
  const id = event.id ?? randomUUID();
  if (typeof id !== 'string' || !ID.test(id)) {
    throw new InvalidEventError('id', 'must be 1-255 printable ASCII characters, no surrounding spaces');
  }
  const key = event.key ?? null;
  if (key !== null && (typeof key !== 'string' || !ID.test(key))) {
    throw new InvalidEventError('key', 'must be 1-255 printable ASCII characters, no surrounding spaces');
  }
  const seq = event.seq ?? null;
  if (seq !== null) {
    if (key === null) throw new InvalidEventError('seq', 'needs a `key`');
    if (!Number.isSafeInteger(seq) || seq < 1)
      throw new InvalidEventError('seq', 'must be a positive integer');
  }
  if (event.body !== undefined && event.rawBody !== undefined) {
    throw new InvalidEventError('body', 'and `rawBody` are exclusive; give one');
  }
  let body: Uint8Array;
  if (event.rawBody !== undefined) {
    if (typeof event.rawBody === 'string') body = Buffer.from(event.rawBody);
    else if (event.rawBody instanceof Uint8Array) body = Buffer.from(event.rawBody);
    else throw new InvalidEventError('rawBody', 'must be a string or a Uint8Array');
  } else {
    const json = JSON.stringify(event.body ?? null);
    if (json === undefined) throw new InvalidEventError('body', 'must be JSON-serialisable');
    body = Buffer.from(json);
  }
  const contentType = event.contentType ?? 'application/json';
  if (typeof contentType !== 'string' || !/^[\x21-\x7e][\x20-\x7e]*$/.test(contentType)) {
    throw new InvalidEventError('contentType', 'must be a media type');
  }
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(event.headers ?? {})) {
    const lower = name.toLowerCase();
    if (!HEADER_NAME.test(lower))
      throw new InvalidEventError('headers', `has a bad name ${JSON.stringify(name)}`);
    if (protocolHeaders.has(lower)) {
      throw new InvalidEventError('headers', `must not set ${lower}: the sender sets it`);
    }
    if (HOP_BY_HOP.has(lower) || lower.startsWith('proxy-')) {
      throw new InvalidEventError('headers', `must not set ${lower}: the HTTP client manages it`);
    }
    if (typeof value !== 'string' || /[\r\n\0]/.test(value)) {
      throw new InvalidEventError('headers', `${lower} must be a string without line breaks`);
    }
    headers[lower] = value;
  }
  return { id, key, seq, body, contentType, headers };
}
