/**
 * The console's options, resolved and checked in one place: a console never starts without a
 * way to tell who is asking, unless it is told `insecure: true` (and then it answers only on a
 * loopback address).
 */
import { InboxOptionsError } from '../errors.js';
import type { Inbox } from '../inbox.js';
import type { Logger } from '../logger.js';
import type { Operations } from '../operations/index.js';
import type { ConsoleRequest } from './request.js';

/** Who is asking, as the `authorize` hook names them: the name goes into every action's log line. */
export type ConsoleUser = string | { readonly name: string };

export interface ConsoleOptions {
  /**
   * The inbox to show. Its replays, skips and unblocks are applied (drained) at once, in this
   * process. Give `inbox` or `operations`.
   */
  inbox?: Inbox;
  /**
   * Handler-free operator actions (`openOperations({ db })`), every source unless it was opened
   * with one: replays are re-queued and the application's sweeper applies them.
   */
  operations?: Operations;
  /**
   * Decides who a request comes from: a name (or `{ name }`) to let it in, anything falsy to
   * answer 401. Given the framework-free request (`request.raw` holds the framework's own).
   */
  authorize?: (
    request: ConsoleRequest,
  ) => ConsoleUser | null | undefined | false | Promise<ConsoleUser | null | undefined | false>;
  /**
   * A shared secret (16 characters or more): accepted as `Authorization: Bearer <token>`, or
   * typed into the login form, which sets an HttpOnly, SameSite=Strict session cookie.
   */
  token?: string;
  /**
   * Neither `authorize` nor `token`: anyone who can reach the console may act. Only requests
   * that arrive on a loopback address are answered; every other gets 401. Never behind a
   * reverse proxy on the same host (what it forwards arrives on loopback). @defaultValue false
   */
  insecure?: boolean;
  /** Show everything, offer no action, refuse every POST but login and logout. @defaultValue false */
  readOnly?: boolean;
  /** Where each action is logged with who did it. @defaultValue JSON lines on stderr */
  logger?: Logger;
  /** Other origins whose POSTs are accepted (`https://ops.example.com`) besides the request's own host. */
  trustedOrigins?: readonly string[];
}

export interface ResolvedConsoleOptions {
  readonly inbox: Inbox | undefined;
  readonly operations: Operations | undefined;
  readonly authorize: ConsoleOptions['authorize'];
  readonly token: string | undefined;
  readonly insecure: boolean;
  readonly readOnly: boolean;
  readonly logger: Logger;
  readonly trustedOrigins: readonly string[];
}

const MIN_TOKEN_LENGTH = 16;

function stderrLogger(): Logger {
  const line = (level: string) => (obj: object, msg?: string) =>
    process.stderr.write(`${JSON.stringify({ level, time: new Date().toISOString(), ...obj, msg })}\n`);
  return { debug: () => {}, info: line('info'), warn: line('warn'), error: line('error') };
}

/**
 * Checks every option and fills in the defaults.
 *
 * ```ts
 * resolveConsoleOptions({ inbox, token: process.env.CONSOLE_TOKEN });
 * ```
 */
export function resolveConsoleOptions(o: ConsoleOptions): ResolvedConsoleOptions {
  if (o === null || typeof o !== 'object') throw new InboxOptionsError('console', 'must be an object');
  if ((o.inbox === undefined) === (o.operations === undefined)) {
    throw new InboxOptionsError('inbox', 'or `operations` is required (one of them, not both)');
  }
  if (o.authorize !== undefined && typeof o.authorize !== 'function') {
    throw new InboxOptionsError('authorize', `must be a function; got ${typeof o.authorize}`);
  }
  if (o.token !== undefined && (typeof o.token !== 'string' || o.token.length < MIN_TOKEN_LENGTH)) {
    throw new InboxOptionsError('token', `must be a string of ${MIN_TOKEN_LENGTH} characters or more`);
  }
  if (o.insecure !== undefined && typeof o.insecure !== 'boolean') {
    throw new InboxOptionsError('insecure', `must be a boolean; got ${JSON.stringify(o.insecure)}`);
  }
  if (o.authorize === undefined && o.token === undefined && o.insecure !== true) {
    throw new InboxOptionsError(
      'authorize',
      'or `token` is required: the console shows payloads and replays events. To run it without ' +
        'authentication on a loopback address only, pass `insecure: true`',
    );
  }
  if (o.readOnly !== undefined && typeof o.readOnly !== 'boolean') {
    throw new InboxOptionsError('readOnly', `must be a boolean; got ${JSON.stringify(o.readOnly)}`);
  }
  const trustedOrigins = o.trustedOrigins ?? [];
  if (!Array.isArray(trustedOrigins))
    throw new InboxOptionsError('trustedOrigins', 'must be an array of origins');
  for (const origin of trustedOrigins) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(origin);
    } catch {}
    if (!parsed || parsed.origin !== origin) {
      throw new InboxOptionsError(
        'trustedOrigins',
        `must hold origins like 'https://ops.example.com' (scheme, host, port; no path); got ${JSON.stringify(origin)}`,
      );
    }
  }
  return {
    inbox: o.inbox,
    operations: o.operations,
    authorize: o.authorize,
    token: o.token,
    insecure: o.insecure === true,
    readOnly: o.readOnly === true,
    logger: o.logger ?? stderrLogger(),
    trustedOrigins,
  };
}

/** Loopback addresses, as Node reports a socket's local address. */
export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  return address === '::1' || address === 'localhost' || /^(::ffff:)?127\./.test(address);
}
