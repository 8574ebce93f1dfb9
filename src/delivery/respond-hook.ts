/** The `respond` option; a hook that throws or returns something unusable is logged, the default answered. */
import { InboxOptionsError } from '../errors.js';
import type { Logger } from '../observability/logger.js';
import { type Outcome, OutcomeKind } from '../outcome.js';
import type { ParsedDelivery } from './delivery.js';
import { HEADER_NAME } from './field-source.js';

/** The event a `respond` hook sees: what identifies it, its body and its headers. */
export interface RespondEvent<TBody = any> {
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  /** The parsed body (the `bodySchema`'s output when one is given), or the bytes when not JSON. */
  readonly body: TBody;
  /** Lower-case names. */
  readonly headers: Readonly<Record<string, string>>;
}

/** What a `respond` hook may change; a string `body` is sent as is (`text/plain`), any other as JSON. */
export interface ResponseShape {
  /** An integer from 200 to 599. A failure (a default of 400 or more) keeps a failure status. */
  readonly status?: number;
  /** Added to the default headers, or replacing them by name (case-insensitive). */
  readonly headers?: Readonly<Record<string, string>>;
  /** A string, or a JSON-serialisable value. */
  readonly body?: unknown;
}

/** Shapes each answer (`event` undefined when refused before its id was read); `undefined`: the default. */
export type RespondHook<TBody = any> = (
  outcome: Outcome,
  event: RespondEvent<TBody> | undefined,
) => ResponseShape | undefined;

// CR, LF, NUL and the other controls but HTAB: a value must not end the header or start another.
const UNSAFE_VALUE = /[\x00-\x08\x0a-\x1f\x7f]/;
const MAX_HEADER_VALUE = 8192;
/** Framing and connection headers are the server's: a hook must not desynchronise the connection. */
const RESERVED_HEADERS = new Set([
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'trailer',
  'te',
  'proxy-connection',
]);
const SHAPE_MEMBERS = new Set(['status', 'headers', 'body']);
const JSON_TYPE = 'application/json; charset=utf-8';
const TEXT_TYPE = 'text/plain; charset=utf-8';

export function resolveRespondHook(hook: unknown): RespondHook | undefined {
  if (hook === undefined) return undefined;
  if (typeof hook !== 'function') {
    throw new InboxOptionsError(
      'respond',
      'must be a function (outcome, event) => ({ status?, headers?, body? }) | undefined',
    );
  }
  return hook as RespondHook;
}

class UnusableShape extends Error {}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A refusal that left nothing stored must not be acknowledged (`rejected` is stored, a dead letter). */
function mustStayFailure(outcome: Outcome): boolean {
  return outcome.status >= 400 && outcome.kind !== OutcomeKind.rejected;
}

function shapedBy(outcome: Outcome, shape: unknown): Outcome {
  if (typeof (shape as { then?: unknown } | null)?.then === 'function') {
    throw new UnusableShape('it returned a promise; the hook must be synchronous');
  }
  if (!isPlainObject(shape)) throw new UnusableShape('it must return an object or undefined');
  for (const member of Object.keys(shape)) {
    if (!SHAPE_MEMBERS.has(member)) {
      throw new UnusableShape(`${JSON.stringify(member)} is not status, headers or body`);
    }
  }
  let status = outcome.status;
  if (shape.status !== undefined) {
    const s = shape.status;
    if (typeof s !== 'number' || !Number.isInteger(s) || s < 200 || s > 599) {
      throw new UnusableShape('status must be an integer from 200 to 599');
    }
    if (s < 400 && mustStayFailure(outcome)) {
      throw new UnusableShape(
        `status ${s} would acknowledge a ${outcome.kind} delivery that was not stored (the sender would not retry it)`,
      );
    }
    status = s;
  }
  const headers: Record<string, string> = { ...outcome.headers };
  let text: string | undefined;
  let body = outcome.body;
  if (shape.body !== undefined) {
    if (typeof shape.body === 'string') {
      text = shape.body;
      headers['content-type'] = TEXT_TYPE;
    } else {
      try {
        text = JSON.stringify(shape.body);
      } catch {}
      if (text === undefined) throw new UnusableShape('body is not JSON-serialisable');
      headers['content-type'] = JSON_TYPE;
      if (isPlainObject(shape.body)) body = shape.body;
    }
  }
  if (shape.headers !== undefined) {
    if (!isPlainObject(shape.headers)) throw new UnusableShape('headers must be an object');
    for (const [given, value] of Object.entries(shape.headers)) {
      const name = given.toLowerCase();
      if (!HEADER_NAME.test(name))
        throw new UnusableShape(`header name ${JSON.stringify(given)} is not valid`);
      if (RESERVED_HEADERS.has(name)) throw new UnusableShape(`header ${name} is set by the server`);
      if (typeof value !== 'string') throw new UnusableShape(`header ${name} must be a string`);
      if (UNSAFE_VALUE.test(value) || value.length > MAX_HEADER_VALUE) {
        throw new UnusableShape(`header ${name} has control characters or is too long`);
      }
      headers[name] = value;
    }
  }
  // A problem's `status` member repeats the HTTP status (RFC 9457): kept equal when only the status changed.
  if (shape.body === undefined && status !== outcome.status && body.status === outcome.status) {
    body = { ...body, status };
  }
  return text === undefined
    ? { kind: outcome.kind, status, headers, body }
    : { kind: outcome.kind, status, headers, body, text };
}

/** The hook's shape of `outcome`, or `outcome` when it returns undefined, throws or is unusable. */
export function shapeOutcome(
  hook: RespondHook,
  logger: Logger,
  outcome: Outcome,
  d: ParsedDelivery | undefined,
): Outcome {
  const event: RespondEvent | undefined = d && {
    id: d.id,
    key: d.key,
    seq: d.seq,
    body: d.body,
    headers: d.headers,
  };
  let shape: unknown;
  try {
    shape = hook(outcome, event);
  } catch (err) {
    logger.error(
      { err, outcome: outcome.kind, id: d?.id },
      'webhook-inbox: the respond hook threw; the default answer was sent',
    );
    return outcome;
  }
  if (shape === undefined) return outcome;
  try {
    return shapedBy(outcome, shape);
  } catch (err) {
    if (!(err instanceof UnusableShape)) throw err;
    logger.error(
      { outcome: outcome.kind, id: d?.id, reason: err.message },
      `webhook-inbox: the respond hook's answer was not used (${err.message}); the default answer was sent`,
    );
    return outcome;
  }
}
