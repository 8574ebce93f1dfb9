/** Where an event's id, key, seq, version and type come from; every error names the source it read. */
import { InboxOptionsError, InvalidDeliveryError } from '../errors.js';
import { jsonOf } from './payload.js';

/** What a function source sees: lower-case header names, the parsed body and the exact bytes. */
export interface FieldDelivery {
  readonly headers: Readonly<Record<string, string>>;
  /** The JSON body, parsed (undefined when the body is not JSON). */
  readonly body: unknown;
  readonly rawBody: Buffer;
}

/**
 * Where one field comes from: a header (`'x-request-id'`, `{ header }`), a JSON pointer into the body
 * (`'/data/object/id'`, `{ body }`), `{ constant }`, or a function of the delivery (`undefined`: absent).
 */
export type FieldSource =
  | string
  | { readonly header: string }
  | { readonly body: string }
  | { readonly constant: string | number }
  | FieldFunction;

export type FieldFunction = (delivery: FieldDelivery) => string | number | undefined | null;

/** The field sources an inbox reads; each left out keeps its default (a header). */
export interface Fields {
  /** The event id (the dedup key). @defaultValue the `Idempotency-Key` header (`headers.id`) */
  readonly id?: FieldSource;
  /** The ordering key. @defaultValue the `X-Key` header (`headers.key`) */
  readonly key?: FieldSource;
  /** The position in the key's sequence (integer ≥ 1). @defaultValue the `X-Seq` header (`headers.seq`) */
  readonly seq?: FieldSource;
  /**
   * The event's type (`event.type`, what `handlers` route by); null when absent.
   * @defaultValue the `provider`'s, else none
   */
  readonly type?: FieldSource;
}

/** A field source, checked and ready to read. `label` is how errors name it. */
export type ResolvedSource =
  | { readonly kind: 'header'; readonly name: string; readonly label: string }
  | { readonly kind: 'body'; readonly path: readonly string[]; readonly label: string }
  | { readonly kind: 'constant'; readonly value: string | number; readonly label: string }
  | { readonly kind: 'function'; readonly read: FieldFunction; readonly label: string };

/** An HTTP header name (an RFC 9110 token). */
export const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/i;

/** RFC 6901: `''` is the whole document; `/a~1b/0` is `["a/b", "0"]`. */
function pointer(text: string, option: string): string[] {
  if (text !== '' && !text.startsWith('/')) {
    throw new InboxOptionsError(
      option,
      `must be a JSON pointer starting with "/"; got ${JSON.stringify(text)}`,
    );
  }
  if (/~[^01]|~$/.test(text)) {
    throw new InboxOptionsError(option, `is not a valid JSON pointer (~ must be followed by 0 or 1)`);
  }
  return text === ''
    ? []
    : text
        .slice(1)
        .split('/')
        .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** Checks a field source given in options; `option` is its name in errors (`fields.seq`). */
export function resolveSource(given: unknown, option: string): ResolvedSource {
  if (typeof given === 'function') return { kind: 'function', read: given as FieldFunction, label: option };
  if (typeof given === 'string') given = given.startsWith('/') ? { body: given } : { header: given };
  if (given !== null && typeof given === 'object') {
    const o = given as Record<string, unknown>;
    const kinds = ['header', 'body', 'constant'].filter((k) => k in o);
    if (kinds.length === 1) {
      if (typeof o.header === 'string') {
        if (!HEADER_NAME.test(o.header)) throw new InboxOptionsError(option, 'must be an HTTP header name');
        const name = o.header.toLowerCase();
        return { kind: 'header', name, label: name };
      }
      if (typeof o.body === 'string')
        return { kind: 'body', path: pointer(o.body, option), label: `body ${o.body}` };
      if (typeof o.constant === 'string' || (typeof o.constant === 'number' && Number.isFinite(o.constant))) {
        return { kind: 'constant', value: o.constant, label: `${option} (constant)` };
      }
    }
  }
  throw new InboxOptionsError(
    option,
    'must be a header name, a JSON pointer ("/field"), { header }, { body }, { constant } or a function of the delivery',
  );
}

function at(body: unknown, path: readonly string[]): unknown {
  let node = body;
  for (const part of path) {
    if (node === null || typeof node !== 'object') return undefined;
    if (Array.isArray(node)) {
      if (!/^(0|[1-9][0-9]*)$/.test(part)) return undefined;
      node = node[Number(part)];
    } else {
      if (!Object.hasOwn(node, part)) return undefined;
      node = (node as Record<string, unknown>)[part];
    }
  }
  return node;
}

/** A header's text as sent (the caller checks it appears once); the others' values, undefined when absent. */
export function readSource(source: ResolvedSource, d: FieldDelivery): unknown {
  switch (source.kind) {
    case 'header':
      return d.headers[source.name];
    case 'body':
      if (d.body === undefined || Buffer.isBuffer(d.body)) {
        throw new InvalidDeliveryError(source.label, `${source.label} requires a JSON body`);
      }
      return at(d.body, source.path) ?? undefined;
    case 'constant':
      return source.value;
    case 'function': {
      const value = source.read(d);
      return value === null ? undefined : value;
    }
  }
}

/** Whether the body must be parsed as JSON whatever its content type. */
export function readsBody(sources: readonly (ResolvedSource | undefined)[]): boolean {
  return sources.some((s) => s?.kind === 'body' || s?.kind === 'function');
}

/** What the sources read of a delivery: `body` as parsed, else (not parsed, or not JSON) its JSON, if any. */
export function fieldDelivery(
  headers: Readonly<Record<string, string>>,
  rawBody: Buffer,
  body: unknown,
): FieldDelivery {
  return {
    headers,
    rawBody,
    get body() {
      return body === undefined || Buffer.isBuffer(body) ? jsonOf(rawBody) : body;
    },
  };
}

/** A stored event's type, read again from what was stored; a stored one that no longer reads has none. */
export function storedTypeOf(
  source: ResolvedSource,
  headers: Readonly<Record<string, string>>,
  rawBody: Buffer,
  body: unknown,
): string | null {
  const value = readSource(source, fieldDelivery(headers, rawBody, body));
  return typeof value === 'string' || typeof value === 'number' ? String(value) : null;
}
