import { InvalidDeliveryError } from '../errors.js';
import {
  type FieldDelivery,
  fieldDelivery,
  type ResolvedSource,
  readSource,
  readsBody,
} from './field-source.js';
import { bodyHash, type ParseMode, parseBody, readsAsJson } from './payload.js';
import { type Delivery, normalizeHeaders, toBuffer } from './request.js';

/** A delivery whose headers and body passed validation. */
export interface ParsedDelivery {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly hash: string;
  readonly rawBody: Buffer;
  /** Undefined only when {@link KnownBodies} said these bytes parse and nothing needed them yet. */
  readonly body: unknown;
  readonly headers: Record<string, string>;
  /** Latest-wins ordering: the object's key and this event's version; null when off or keyless. */
  readonly latest: { readonly key: string; readonly version: number } | null;
  /** `fields.type` or the provider's. */
  readonly type: string | null;
  /** Read by the receive path; '' or absent: none. */
  readonly group?: string;
}

/** Bodies known to parse as JSON, by event id and body hash. */
export interface KnownBodies {
  bodyParses(id: string, hash: string): boolean;
}

const PRINTABLE_ASCII = /^[\x20-\x7e]{1,255}$/;
// C0, DEL and C1 controls: none of them belongs in a key an operator reads.
const CONTROL = /[\x00-\x1f\x7f-\x9f]/;
const MAX_KEY_CHARACTERS = 255;
const SEQ = /^[1-9][0-9]{0,15}$/;
const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** An identity header's one value: a repeat is refused, never joined (`A, A` would make a retry new). */
function single(raw: Delivery['headers'], headers: Record<string, string>, name: string): string | undefined {
  let count = 0;
  for (const given in raw) {
    if (given.length !== name.length || (given !== name && given.toLowerCase() !== name)) continue;
    const value = raw[given];
    if (value === undefined) continue;
    count += typeof value === 'string' ? 1 : (value as readonly string[]).length;
  }
  if (count > 1) throw new InvalidDeliveryError(name, `${name} must appear once, not ${count} times`);
  return headers[name];
}

/** A key as text: latin1 header bytes decoded as the UTF-8 they carry (invalid is refused). */
function keyOf({ text: value, fromHeader }: FieldText, name: string): string {
  let text = value;
  if (fromHeader && /^[\x00-\xff]*$/.test(value) && /[\x80-\xff]/.test(value)) {
    try {
      text = UTF8.decode(Buffer.from(value, 'latin1'));
    } catch {
      throw new InvalidDeliveryError(name, `${name} must be valid UTF-8`);
    }
  }
  const length = [...text].length;
  if (length < 1 || length > MAX_KEY_CHARACTERS || CONTROL.test(text)) {
    throw new InvalidDeliveryError(
      name,
      `${name} must be 1-${MAX_KEY_CHARACTERS} characters, no control characters (C0, DEL or C1)`,
    );
  }
  return text;
}

const ISO_DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;

/** A version: an integer, or an ISO 8601 date-time as epoch milliseconds (finer fractions cut). */
function versionOf(text: string, name: string): number {
  if (/^-?[0-9]{1,16}$/.test(text) && Number.isSafeInteger(Number(text))) return Number(text);
  const ms = ISO_DATE_TIME.test(text) ? Date.parse(text) : Number.NaN;
  if (!Number.isFinite(ms)) {
    throw new InvalidDeliveryError(name, `${name} must be an integer or an ISO 8601 date-time`);
  }
  return ms;
}

type FieldText = { text: string; fromHeader: boolean };

/** Reads one field's value as text, or undefined. */
type FieldReader = (source: ResolvedSource) => FieldText | undefined;

/** Reads a delivery's fields; `view` is made at the first read, as an object with a getter is costly. */
function fieldReader(
  raw: Delivery['headers'],
  headers: Record<string, string>,
  view: () => FieldDelivery,
): FieldReader {
  return (source) => {
    if (source.kind === 'header') {
      const value = single(raw, headers, source.name);
      return value === undefined ? undefined : { text: value, fromHeader: true };
    }
    const value = readSource(source, view());
    if (value === undefined) return undefined;
    if (typeof value === 'string') return { text: value, fromHeader: false };
    if (typeof value === 'number' && Number.isSafeInteger(value))
      return { text: String(value), fromHeader: false };
    throw new InvalidDeliveryError(source.label, `${source.label} must be a string or an integer`);
  };
}

type LatestOrder = { readonly key: ResolvedSource; readonly version: ResolvedSource };

/** Latest-wins: the object's key and version, or null without a key; a key without a version is refused. */
function latestOf(order: LatestOrder, read: FieldReader): ParsedDelivery['latest'] {
  const { key: keySource, version: versionSource } = order;
  const objectKey = read(keySource);
  if (objectKey === undefined) return null;
  const text = keyOf(objectKey, keySource.label);
  const version = read(versionSource);
  if (version === undefined) {
    throw new InvalidDeliveryError(
      versionSource.label,
      `${versionSource.label} is required when ${keySource.label} is present`,
    );
  }
  return { key: text, version: versionOf(version.text, versionSource.label) };
}

/** A stored event's latest-wins key and version, read again for a worker; null when they no longer read. */
export function storedLatestOf(
  order: LatestOrder,
  headers: Readonly<Record<string, string>>,
  rawBody: Buffer,
  body: unknown,
): ParsedDelivery['latest'] {
  const stored = { ...headers };
  try {
    return latestOf(
      order,
      fieldReader(stored, stored, () => fieldDelivery(stored, rawBody, body)),
    );
  } catch {
    return null;
  }
}

export interface DeliveryOptions {
  readonly fields: {
    readonly id: ResolvedSource;
    readonly key: ResolvedSource;
    readonly seq: ResolvedSource;
    readonly type: ResolvedSource | undefined;
  };
  readonly order:
    | { readonly policy: 'seq' }
    | { readonly policy: 'latest'; readonly key: ResolvedSource; readonly version: ResolvedSource };
  readonly idFromBody: boolean;
  readonly maxBodyBytes: number;
  readonly parse: ParseMode;
  readonly provider: object | undefined;
}

/** Validates a delivery against the wire contract (docs/outcomes.md); errors name the field. */
export function parseDelivery(
  delivery: Delivery,
  options: DeliveryOptions,
  /** The id a verified signature covers: it is the event's id, and an id header that disagrees is refused. */
  signedId?: string,
  /** Given when a duplicate can be answered from the cache: a body these say parses is not parsed here. */
  known?: KnownBodies,
): ParsedDelivery {
  const rawBody = toBuffer(delivery.rawBody);
  if (rawBody.length > options.maxBodyBytes) {
    throw new InvalidDeliveryError('body', `body is larger than ${options.maxBodyBytes} bytes`, 413);
  }
  const headers = normalizeHeaders(delivery.headers);
  const hash = bodyHash(rawBody);

  const fields = options.fields;
  const latestOrder = options.order.policy === 'latest' ? options.order : undefined;
  // A body source reads the body first: a broken JSON body is refused naming the body.
  const body = readsBody([
    fields.id,
    fields.key,
    fields.seq,
    latestOrder?.key,
    latestOrder?.version,
    fields.type,
  ])
    ? parseBody(rawBody, headers['content-type'], options.parse)
    : undefined;
  let fd: FieldDelivery | undefined;
  const read = fieldReader(delivery.headers, headers, () => (fd ??= fieldDelivery(headers, rawBody, body)));

  const idField = read(fields.id);
  const idName = fields.id.label;
  if (signedId !== undefined && idField !== undefined && idField.text !== signedId) {
    throw new InvalidDeliveryError(
      idName,
      `${idName} differs from the event id the signature covers; send the signed id or none`,
    );
  }
  let id = signedId ?? idField?.text;
  if (id === undefined) {
    if (!options.idFromBody) {
      throw new InvalidDeliveryError(
        idName,
        fields.id.kind === 'header'
          ? // Usually a provider's webhook sent to an inbox not told which provider.
            `${idName} header is required${options.provider ? '' : ": for a provider's webhooks set the inbox's `provider` (e.g. stripe({ secret })); else say where the id is with `fields.id`, or derive it with `idFromBody`"}`
          : `${idName} is required`,
      );
    }
    id = `sha256:${hash}`;
  } else if (!PRINTABLE_ASCII.test(id)) {
    throw new InvalidDeliveryError(idName, `${idName} must be 1-255 printable ASCII characters`);
  }

  // Under latest-wins, the seq stream's fields are not read: one key is in one policy.
  const keyField = latestOrder ? undefined : read(fields.key);
  const seqField = latestOrder ? undefined : read(fields.seq);
  const keyName = fields.key.label;
  const seqName = fields.seq.label;
  let key: string | null = null;
  let seq: number | null = null;
  if (keyField !== undefined) {
    key = keyOf(keyField, keyName);
    if (seqField === undefined)
      throw new InvalidDeliveryError(seqName, `${seqName} is required when ${keyName} is present`);
  }
  if (seqField !== undefined) {
    if (keyField === undefined) throw new InvalidDeliveryError(keyName, `${seqName} requires ${keyName}`);
    const n = SEQ.test(seqField.text) ? Number(seqField.text) : Number.NaN;
    if (!Number.isSafeInteger(n)) {
      throw new InvalidDeliveryError(
        seqName,
        seqField.fromHeader
          ? `${seqName} must be a decimal integer from 1 to 9007199254740991`
          : `${seqName} must be an integer ≥ 1 (at most 9007199254740991)`,
      );
    }
    seq = n;
  }

  const latest = latestOrder ? latestOf(latestOrder, read) : null;
  // Checked as a key is: an operator filters by it.
  const typeField = fields.type && read(fields.type);
  const type = typeField ? keyOf(typeField, fields.type!.label) : null;
  const contentType = headers['content-type'];
  const parsed =
    body !== undefined ||
    (known !== undefined && readsAsJson(contentType, options.parse) && known.bodyParses(id, hash))
      ? body
      : parseBody(rawBody, contentType, options.parse);
  return { id, key, seq, latest, type, hash, rawBody, body: parsed, headers };
}
