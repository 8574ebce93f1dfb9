import { parseDuration } from '../duration.js';
import { InboxOptionsError } from '../errors.js';
import type { Inbox } from '../inbox/inbox.js';
import type { Logger } from '../observability/logger.js';
import type { Operations } from '../operations/index.js';
import type { ConsoleRequest } from './request.js';

/** Who is asking, as the `authorize` hook names them: the name goes into every action's log line. */
export type ConsoleUser = string | { readonly name: string };

export interface ConsoleOptions {
  /** The inbox to show; its actions are applied at once, in this process. Give `inbox` or `operations`. */
  inbox?: Inbox;
  /** Handler-free operations (`openOperations({ db })`): replays are applied by the application's sweeper. */
  operations?: Operations;
  /** Who a request comes from: a name (or `{ name }`) to let it in, anything falsy for 401. */
  authorize?: (
    request: ConsoleRequest,
  ) => ConsoleUser | null | undefined | false | Promise<ConsoleUser | null | undefined | false>;
  /** A shared secret (16 characters or more), as `Authorization: Bearer <token>` or typed into the login form. */
  token?: string;
  /**
   * No `authorize` nor `token`: anyone who reaches the console may act, on a loopback address only.
   * Never behind a reverse proxy on the same host (it forwards on loopback). @defaultValue false
   */
  insecure?: boolean;
  /** Show everything, offer no action. @defaultValue false */
  readOnly?: boolean;
  /** Where each action is logged with who did it. @defaultValue JSON lines on stderr */
  logger?: Logger;
  /** Other origins whose POSTs are accepted (`https://ops.example.com`). */
  trustedOrigins?: readonly string[];
  /**
   * The `Host` names it answers to (`ops.example.com` on any port, `localhost:8080`); another is
   * refused 403, against DNS rebinding. @defaultValue with `insecure: true` the loopback names, else any
   */
  allowedHosts?: readonly string[];
  /**
   * The key of CSRF tokens and sessions (32 characters or more). Give every replica the same one, so
   * each accepts the others' forms and sessions; rotate it to end every session.
   * @defaultValue a random key per process
   */
  secret?: string;
  /** How long a login session lasts (ms, or `'8h'`), from 1 minute to 30 days. @defaultValue '8h' */
  sessionTtl?: number | string;
  /**
   * Behind one reverse proxy: the client's address is the last `X-Forwarded-For` entry, and
   * `X-Forwarded-Proto: https` makes the cookie `Secure`; else both are ignored. @defaultValue false
   */
  trustProxy?: boolean;
  /** `'always'`: the session cookie is always `Secure`; `'auto'`: when the request came over TLS. @defaultValue 'auto' */
  secureCookie?: 'auto' | 'always';
}

export interface ResolvedConsoleOptions {
  readonly inbox: Inbox | undefined;
  readonly operations: Operations | undefined;
  readonly authorize: ConsoleOptions['authorize'];
  readonly token: string | undefined;
  readonly secret: string | undefined;
  readonly insecure: boolean;
  readonly readOnly: boolean;
  readonly logger: Logger;
  readonly trustedOrigins: readonly string[];
  readonly allowedHosts: readonly string[] | undefined;
  readonly sessionTtlMs: number;
  readonly trustProxy: boolean;
  readonly secureCookie: 'auto' | 'always';
}

export const LOOPBACK_HOSTS: readonly string[] = Object.freeze(['localhost', '127.0.0.1', '[::1]']);

const HOST_ENTRY = /^(\[[0-9a-f:.]+\]|[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?)(:[0-9]{1,5})?$/;

const MIN_TOKEN_LENGTH = 16;
/** A key, not a password typed in: long enough to be random. */
const MIN_SECRET_LENGTH = 32;

function checkBoolean(o: ConsoleOptions, name: 'insecure' | 'readOnly' | 'trustProxy'): void {
  if (o[name] !== undefined && typeof o[name] !== 'boolean') {
    throw new InboxOptionsError(name, `must be a boolean; got ${JSON.stringify(o[name])}`);
  }
}

function stderrLogger(): Logger {
  const line = (level: string) => (obj: object, msg?: string) =>
    process.stderr.write(`${JSON.stringify({ level, time: new Date().toISOString(), ...obj, msg })}\n`);
  return { debug: () => {}, info: line('info'), warn: line('warn'), error: line('error') };
}

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
  if (o.secret !== undefined && (typeof o.secret !== 'string' || o.secret.length < MIN_SECRET_LENGTH)) {
    throw new InboxOptionsError('secret', `must be a string of ${MIN_SECRET_LENGTH} characters or more`);
  }
  checkBoolean(o, 'insecure');
  if (o.authorize === undefined && o.token === undefined && o.insecure !== true) {
    throw new InboxOptionsError(
      'authorize',
      'or `token` is required: the console shows payloads and replays events. To run it without ' +
        'authentication on a loopback address only, pass `insecure: true`',
    );
  }
  checkBoolean(o, 'readOnly');
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
  let allowedHosts: string[] | undefined;
  if (o.allowedHosts !== undefined) {
    if (!Array.isArray(o.allowedHosts) || o.allowedHosts.length === 0) {
      throw new InboxOptionsError('allowedHosts', 'must be a non-empty array of host names');
    }
    allowedHosts = o.allowedHosts.map((entry) => {
      if (typeof entry !== 'string' || !HOST_ENTRY.test(entry.toLowerCase())) {
        throw new InboxOptionsError(
          'allowedHosts',
          `must hold host names like 'ops.example.com' or 'localhost:8080' (no scheme, no path); got ${JSON.stringify(entry)}`,
        );
      }
      return entry.toLowerCase();
    });
  } else if (o.insecure === true) allowedHosts = [...LOOPBACK_HOSTS];
  let sessionTtlMs = 8 * 3_600_000;
  if (o.sessionTtl !== undefined) {
    const ms = parseDuration(o.sessionTtl);
    if (ms === undefined || ms < 60_000 || ms > 30 * 86_400_000) {
      throw new InboxOptionsError(
        'sessionTtl',
        `must be milliseconds or a duration like '8h', from 1 minute to 30 days; got ${JSON.stringify(o.sessionTtl)}`,
      );
    }
    sessionTtlMs = ms;
  }
  checkBoolean(o, 'trustProxy');
  const secureCookie = o.secureCookie ?? 'auto';
  if (secureCookie !== 'auto' && secureCookie !== 'always') {
    throw new InboxOptionsError(
      'secureCookie',
      `must be 'auto' or 'always'; got ${JSON.stringify(o.secureCookie)}`,
    );
  }
  return {
    inbox: o.inbox,
    operations: o.operations,
    authorize: o.authorize,
    token: o.token,
    secret: o.secret,
    insecure: o.insecure === true,
    readOnly: o.readOnly === true,
    logger: o.logger ?? stderrLogger(),
    trustedOrigins,
    allowedHosts,
    sessionTtlMs,
    trustProxy: o.trustProxy === true,
    secureCookie,
  };
}

export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  return address === '::1' || address === 'localhost' || /^(::ffff:)?127\./.test(address);
}
