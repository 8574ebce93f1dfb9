/** The kinds of outcome one delivery can have; docs/outcomes.md has a section on each. */
export const OutcomeKind = Object.freeze({
  processed: 'processed',
  duplicate: 'duplicate',
  held: 'held',
  deadLettered: 'dead-lettered',
  inFlight: 'in-flight',
  mismatch: 'mismatch',
  invalid: 'invalid',
  unauthorized: 'unauthorized',
  bufferFull: 'buffer-full',
  failed: 'failed',
  pending: 'pending',
  shed: 'shed',
  unavailable: 'unavailable',
  /** A body parser consumed the request before the inbox: 500, nothing stored. */
  misconfigured: 'misconfigured',
  /** The handler threw RejectEvent: dead-lettered at once, 422. */
  rejected: 'rejected',
  /** Latest-wins: older than its key's last applied version; recorded, not applied, 200. */
  superseded: 'superseded',
  /** No handler takes its type (`handlers`): recorded `ignored`, not applied, 200. */
  ignored: 'ignored',
  /** A request to the webhook path with another method than POST (answered by the adapters). */
  methodNotAllowed: 'method-not-allowed',
  /** Not a delivery: the answer to `GET …/health` (`inbox.healthOutcome()`). */
  health: 'health',
} as const);
export type OutcomeKind = (typeof OutcomeKind)[keyof typeof OutcomeKind];

/** What the inbox decided about one delivery; adapters write `status`, `headers` and {@link responseText}. */
export interface Outcome {
  readonly kind: OutcomeKind;
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  /** The JSON body (a `respond` hook's, when it returned an object). */
  readonly body: Readonly<Record<string, unknown>>;
  /** The body exactly as sent, when a `respond` hook gave one; else `JSON.stringify(body)`. */
  readonly text?: string;
}

/** The bytes of an outcome's body, as the adapters write them. */
export function responseText(outcome: Outcome): string {
  return outcome.text ?? JSON.stringify(outcome.body);
}

const JSON_HEADERS = Object.freeze({ 'content-type': 'application/json; charset=utf-8' });
const REPLAY_HEADERS = Object.freeze({
  'content-type': 'application/json; charset=utf-8',
  'idempotent-replayed': 'true',
});

/** Where the documentation is read (the package does not ship docs/). */
export const DOCS_BASE = 'https://github.com/webhook-inbox/webhook-inbox/blob/main/docs/';

/** A page of the documentation (`outcomes.md#failed`) as a URL. */
export function docsUrl(page: string): string {
  return DOCS_BASE + page;
}

/** Problem `type` URLs: the section of docs/outcomes.md on each outcome kind (`…#in-flight`). */
export const PROBLEM_TYPE_BASE = docsUrl('outcomes.md#');

export function ok(
  kind: OutcomeKind,
  status: number,
  body: Record<string, unknown>,
  replayed = false,
): Outcome {
  return { kind, status, headers: replayed ? REPLAY_HEADERS : JSON_HEADERS, body };
}

const TITLES: Record<string, string> = {
  'in-flight': 'Delivery in flight',
  mismatch: 'Idempotency key reused',
  invalid: 'Invalid delivery',
  unauthorized: 'Signature verification failed',
  'buffer-full': 'Reorder buffer full',
  failed: 'Handler failed',
  shed: 'Overloaded',
  unavailable: 'Inbox unavailable',
  misconfigured: 'Inbox misconfigured',
  'method-not-allowed': 'Method not allowed',
  rejected: 'Event rejected',
};

/** Statuses whose title says more than their kind's (`invalid`, which suggests a malformed header). */
const STATUS_TITLES: Record<number, string> = {
  413: 'Body too large',
  408: 'Request timeout',
};

/** An RFC 9457 problem outcome. `detail` must never carry internals (SQL, stacks, handler messages). */
export function problem(
  kind: OutcomeKind,
  status: number,
  detail: string,
  extra: { field?: string; retryAfterSeconds?: number; [k: string]: unknown } = {},
): Outcome {
  const { retryAfterSeconds, ...members } = extra;
  const headers: Record<string, string> = { 'content-type': 'application/problem+json; charset=utf-8' };
  if (retryAfterSeconds !== undefined) headers['retry-after'] = String(retryAfterSeconds);
  // The rest of the body is not read: the connection cannot carry another request.
  if (status === 413 || status === 408) headers.connection = 'close';
  return {
    kind,
    status,
    headers,
    body: {
      type: PROBLEM_TYPE_BASE + kind,
      title: STATUS_TITLES[status] ?? TITLES[kind] ?? 'Error',
      status,
      detail,
      ...members,
    },
  };
}

/** The answer to another method than POST on the webhook path: 405 with `Allow: POST`. */
export function methodNotAllowed(): Outcome {
  const outcome = problem(
    OutcomeKind.methodNotAllowed,
    405,
    'This endpoint receives webhook deliveries with POST only.',
  );
  return { ...outcome, headers: { ...outcome.headers, allow: 'POST' } };
}
