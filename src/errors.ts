/** An error with a stable `code` and the HTTP status it maps to. */
export class InboxError extends Error {
  override name = 'InboxError';
  constructor(
    message: string,
    readonly code: string,
    readonly status: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** A bad option given to `createInbox` or an adapter. Thrown at construction. */
export class InboxOptionsError extends InboxError {
  override name = 'InboxOptionsError';
  constructor(
    readonly option: string,
    message: string,
  ) {
    super(`webhook-inbox: option \`${option}\` ${message}`, 'invalid-option', 500);
  }
}

/** A delivery that cannot be accepted as sent: a header, or the body, is wrong. */
export class InvalidDeliveryError extends InboxError {
  override name = 'InvalidDeliveryError';
  /** A 413 whose body's rest is being read and dropped: the answer keeps the connection open. */
  draining = false;
  constructor(
    readonly field: string,
    message: string,
    status = 400,
  ) {
    super(message, status === 413 ? 'body-too-large' : 'invalid-delivery', status);
  }
}

/** Signature verification is on and the delivery did not pass it. */
export class UnauthorizedDeliveryError extends InboxError {
  override name = 'UnauthorizedDeliveryError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message, 'unauthorized', 401);
  }
}

/** The raw body is gone: a body parser ran before the inbox, which needs the exact bytes. */
export class RawBodyUnavailableError extends InboxError {
  override name = 'RawBodyUnavailableError';
  constructor(hint: string) {
    super(
      `webhook-inbox: the request body was already consumed by a body parser. ${hint}`,
      'raw-body-unavailable',
      500,
    );
  }
}

/** The handler threw. Wraps its error so the inbox can tell it from its own failures. */
export class HandlerError extends InboxError {
  override name = 'HandlerError';
  constructor(cause: unknown) {
    super('webhook-inbox: the handler threw', 'handler-failed', 500, { cause });
  }
}

/**
 * Thrown by a handler to refuse an event for good: dead-lettered at once (`rejected`), answered 422; the
 * message is stored for the operator, never sent back.
 *
 * ```ts
 * if (!Number.isInteger(event.body.amount)) throw new RejectEvent('amount must be an integer');
 * ```
 */
export class RejectEvent extends InboxError {
  override name = 'RejectEvent';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, 'rejected', 422, options);
  }
}

/**
 * Thrown by a handler: "not yet". The event waits until `at` (or `afterMs`), spending no attempt.
 *
 * ```ts
 * if (!order) throw new RetryLater({ afterMs: 60_000 }); // the order's own event has not arrived yet
 * ```
 */
export class RetryLater extends InboxError {
  override name = 'RetryLater';
  /** When the event is to be applied again. */
  readonly at: Date;
  /** Holds the event's whole group until `at` (option `groups`): a tenant's 429 from downstream. */
  readonly group: boolean;
  constructor(when: { at: Date } | { afterMs: number }, options?: { cause?: unknown; group?: boolean }) {
    let at: Date | undefined;
    if (when && 'at' in when && when.at instanceof Date && Number.isFinite(when.at.getTime())) at = when.at;
    else if (when && 'afterMs' in when && Number.isFinite(when.afterMs) && when.afterMs >= 0)
      at = new Date(Date.now() + when.afterMs);
    if (!at) {
      throw new TypeError(
        'webhook-inbox: RetryLater needs { at: <a valid Date> } or { afterMs: <milliseconds, 0 or more> }',
      );
    }
    super(`retry at ${at.toISOString()}`, 'retry-later', 202, options);
    this.at = at;
    this.group = options?.group === true;
  }
}

/**
 * An operator action not done as asked (nothing changed); `code`: `not-found`, `ambiguous`, `refused`
 * or `locked`.
 */
export class OperationError extends InboxError {
  override name = 'OperationError';
  constructor(code: 'not-found' | 'ambiguous' | 'refused' | 'locked', message: string) {
    super(message, code, code === 'not-found' ? 404 : 409);
  }
}

/** No pool connection became free within `poolWaitTimeoutMs`: the delivery is shed (503). */
export class PoolWaitTimeoutError extends InboxError {
  override name = 'PoolWaitTimeoutError';
  constructor(readonly waitedMs: number) {
    const message = `webhook-inbox: no database connection became free within ${waitedMs} ms`;
    super(message, 'pool-wait-timeout', 503);
  }
}

/** The handler ran past `handlerTimeoutMs`; its transaction was rolled back. */
export class HandlerTimeoutError extends InboxError {
  override name = 'HandlerTimeoutError';
  constructor(readonly timeoutMs: number) {
    super(`webhook-inbox: the handler did not finish within ${timeoutMs} ms`, 'handler-timeout', 500);
  }
}

/**
 * The inbox could not start: `inbox.ready()` rejects with it, naming the cause and the fix where known.
 * The inbox retries until `close()`: to stop at boot, catch it and exit.
 */
export class InboxStartError extends InboxError {
  override name = 'InboxStartError';
  constructor(reason: string, options: { cause: unknown; code?: string }) {
    super(`webhook-inbox: could not start: ${reason}`, options.code ?? 'start-failed', 503, {
      cause: options.cause,
    });
  }
}

/** The embedded database is needed and the optional peer `@electric-sql/pglite` is not installed. */
export class EmbeddedDatabaseUnavailableError extends InboxStartError {
  override name = 'EmbeddedDatabaseUnavailableError';
  constructor(cause: unknown) {
    super(
      "no `db` was given (or db: 'memory' / dataDir), so the embedded PGlite database is needed, " +
        'but @electric-sql/pglite is not installed. Install it (npm install @electric-sql/pglite), ' +
        'or pass db: a PostgreSQL connection string or pg.Pool.',
      { cause, code: 'embedded-database-unavailable' },
    );
  }
}
