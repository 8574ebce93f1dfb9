/**
 * The ledger's own routes answer errors as the inbox does: RFC 9457 problem+json, with a detail
 * of our own. Never a framework's HTML page, a stack trace, a file path or a database message
 * (those go to the log). One helper per framework calls these.
 */

export interface Problem {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Readonly<Record<string, unknown>>;
}

const TITLES: Record<number, string> = {
  400: 'Bad request',
  404: 'Not found',
  405: 'Method not allowed',
  413: 'Payload too large',
  415: 'Unsupported media type',
  500: 'Internal error',
};

export function ledgerProblem(status: number, detail: string, extra: Record<string, unknown> = {}): Problem {
  return {
    status,
    headers: { 'content-type': 'application/problem+json; charset=utf-8' },
    body: { type: 'about:blank', title: TITLES[status] ?? 'Error', status, detail, ...extra },
  };
}

export const notFound = (): Problem => ledgerProblem(404, 'No such route');

/**
 * An error thrown by a route or the framework. A client error the framework recognised (a
 * malformed URL, JSON that does not parse: a 4xx `status`/`statusCode`) keeps its status with a
 * generic detail; anything else is 500 and logged.
 */
export function problemForError(err: unknown): Problem {
  const e = err as { status?: unknown; statusCode?: unknown } | null;
  const status = Number(e?.status ?? e?.statusCode);
  if (Number.isInteger(status) && status >= 400 && status < 500) {
    return ledgerProblem(status, status === 404 ? 'No such route' : 'The request is malformed');
  }
  console.error('ledger: unexpected error', err);
  return ledgerProblem(500, 'The request could not be served');
}

const CONTROL = /[\x00-\x1f\x7f-\x9f]/;

/** An account key from the URL: 1-255 characters, no control characters; a 400 problem otherwise. */
export function checkAccountKey(key: string): Problem | undefined {
  const length = [...key].length;
  if (length < 1 || length > 255 || CONTROL.test(key)) {
    return ledgerProblem(400, 'The account key must be 1-255 characters, no control characters', {
      field: 'key',
    });
  }
  return undefined;
}

/** POST /fail-next is a test hook: served only when LEDGER_TEST_HOOKS=1 (or `testHooks: true`). */
export function testHooksFromEnv(env: Record<string, string | undefined> = process.env): boolean {
  return env.LEDGER_TEST_HOOKS === '1';
}
