/** Who is asking, and whether a POST comes from the console's own page (same origin AND a CSRF token). */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { isLoopback, type ResolvedConsoleOptions } from './options.js';
import { type ConsoleRequest, header } from './request.js';

export const SESSION_COOKIE = 'webhook_inbox_console';

export interface Principal {
  readonly name: string;
  readonly via: 'authorize' | 'bearer' | 'session' | 'insecure';
  /** The login session's id: what logout revokes, and what the CSRF token is bound to. */
  readonly session?: string;
}

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The most sessions held at once; past it the oldest ends (that operator logs in again). */
const MAX_SESSIONS = 10_000;

/**
 * Without a `secret`: random ids whose SHA-256 this process keeps. With one: `<expiry>.<random>.<HMAC>`,
 * signed, for every replica.
 */
export class Sessions {
  readonly #expires = new Map<string, number>();
  readonly #revoked = new Map<string, number>();
  constructor(
    readonly ttlMs: number,
    readonly secret?: string,
  ) {}

  #digest(id: string): string {
    return createHash('sha256').update(id).digest('base64url');
  }

  #sign(body: string): string {
    return createHmac('sha256', this.secret!).update(`session:${body}`).digest('base64url');
  }

  create(now = Date.now()): string {
    if (this.secret !== undefined) {
      const body = `${now + this.ttlMs}.${randomBytes(24).toString('base64url')}`;
      return `${body}.${this.#sign(body)}`;
    }
    // Insertion order is expiry order (one TTL for all): the oldest are at the front.
    for (const [digest, expires] of this.#expires) {
      if (expires > now && this.#expires.size < MAX_SESSIONS) break;
      this.#expires.delete(digest);
    }
    const id = randomBytes(32).toString('base64url');
    this.#expires.set(this.#digest(id), now + this.ttlMs);
    return id;
  }

  valid(id: string, now = Date.now()): boolean {
    if (this.secret !== undefined) {
      const at = id.lastIndexOf('.');
      const body = id.slice(0, at);
      const expires = Number(body.slice(0, body.indexOf('.')));
      return (
        at > 0 &&
        sameSecret(id.slice(at + 1), this.#sign(body)) &&
        Number.isSafeInteger(expires) &&
        expires > now &&
        !this.#revoked.has(this.#digest(id))
      );
    }
    const expires = this.#expires.get(this.#digest(id));
    return expires !== undefined && expires > now;
  }

  revoke(id: string, now = Date.now()): void {
    if (this.secret === undefined) {
      this.#expires.delete(this.#digest(id));
      return;
    }
    for (const [digest, expires] of this.#revoked) {
      if (expires > now && this.#revoked.size < MAX_SESSIONS) break;
      this.#revoked.delete(digest);
    }
    this.#revoked.set(this.#digest(id), now + this.ttlMs);
  }
}

export const LOGIN_FAILURES_ALLOWED = 5;
const LOGIN_WINDOW_MS = 60_000;
const MAX_THROTTLED_ADDRESSES = 10_000;

/** After five failed logins within a minute an address is refused (429): a token cannot be guessed at speed. */
export class LoginThrottle {
  readonly #failures = new Map<string, { since: number; count: number }>();

  retryAfter(address: string, now = Date.now()): number {
    const entry = this.#failures.get(address);
    if (!entry || now - entry.since >= LOGIN_WINDOW_MS || entry.count < LOGIN_FAILURES_ALLOWED) return 0;
    return Math.max(1, Math.ceil((entry.since + LOGIN_WINDOW_MS - now) / 1000));
  }

  failed(address: string, now = Date.now()): void {
    const entry = this.#failures.get(address);
    if (entry && now - entry.since < LOGIN_WINDOW_MS) {
      entry.count++;
      return;
    }
    this.#failures.delete(address);
    // Insertion order is window order: the oldest windows are at the front.
    for (const [other, e] of this.#failures) {
      if (now - e.since < LOGIN_WINDOW_MS && this.#failures.size < MAX_THROTTLED_ADDRESSES) break;
      this.#failures.delete(other);
    }
    this.#failures.set(address, { since: now, count: 1 });
  }
}

function lastOf(request: ConsoleRequest, name: string): string | undefined {
  const value = request.headers[name];
  const text = Array.isArray(value) ? value.join(',') : value;
  const last = text?.split(',').at(-1)?.trim();
  return last ? last : undefined;
}

/** With `trustProxy`, the last X-Forwarded-For entry (the ones before it are whatever the client wrote). */
export function clientAddress(options: ResolvedConsoleOptions, request: ConsoleRequest): string {
  const forwarded = options.trustProxy ? lastOf(request, 'x-forwarded-for') : undefined;
  return forwarded ?? request.remoteAddress ?? 'unknown';
}

export function secureRequest(options: ResolvedConsoleOptions, request: ConsoleRequest): boolean {
  if (options.secureCookie === 'always' || request.secure === true) return true;
  return options.trustProxy && lastOf(request, 'x-forwarded-proto')?.toLowerCase() === 'https';
}

/** A name in `allowedHosts` matches on any port; `name:port` on that port only. */
export function hostAllowed(options: ResolvedConsoleOptions, request: ConsoleRequest): boolean {
  if (options.allowedHosts === undefined) return true;
  const host = header(request, 'host')?.trim().toLowerCase();
  const m = host ? /^(\[[^\]]*\]|[^:[\]]*)(?::([0-9]+))?$/.exec(host) : null;
  if (!host || !m) return false;
  const name = m[1]!;
  return options.allowedHosts.some((entry) => entry === host || entry === name);
}

export function cookies(request: ConsoleRequest): Map<string, string> {
  const jar = new Map<string, string>();
  for (const part of (header(request, 'cookie') ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0) jar.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  return jar;
}

export function tokenMatches(options: ResolvedConsoleOptions, given: string): boolean {
  return options.token !== undefined && sameSecret(given, options.token);
}

/** The principal of a request, or undefined (401). The hook's exceptions propagate (500). */
export async function authenticate(
  options: ResolvedConsoleOptions,
  sessions: Sessions,
  request: ConsoleRequest,
): Promise<Principal | undefined> {
  if (options.token !== undefined) {
    const auth = header(request, 'authorization') ?? '';
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    if (bearer && sameSecret(bearer[1]!, options.token)) return { name: 'token', via: 'bearer' };
    const session = cookies(request).get(SESSION_COOKIE);
    if (session && sessions.valid(session)) return { name: 'token', via: 'session', session };
  }
  if (options.authorize) {
    const user = await options.authorize(request);
    if (user) {
      const name = typeof user === 'string' ? user : user.name;
      if (typeof name === 'string' && name !== '') return { name, via: 'authorize' };
    }
  }
  if (options.insecure && options.token === undefined && options.authorize === undefined) {
    if (isLoopback(request.localAddress)) return { name: 'insecure-loopback', via: 'insecure' };
  }
  return undefined;
}

/** CSRF tokens: an HMAC of the user's name and session, stateless so any number of tabs work. */
export class CsrfTokens {
  readonly #key: Buffer;
  constructor(secret?: string) {
    // Derived, so that the same secret never keys two things (sessions sign under it too).
    this.#key =
      secret === undefined ? randomBytes(32) : createHmac('sha256', secret).update('csrf-key').digest();
  }

  for(principal: Principal): string {
    return createHmac('sha256', this.#key)
      .update(`csrf:${principal.name}:${principal.session ?? ''}`)
      .digest('base64url');
  }

  verify(principal: Principal, given: string | undefined): boolean {
    return given !== undefined && sameSecret(given, this.for(principal));
  }
}

/** Origin (else Referer) names the Host or a trusted origin; neither is refused (browsers send Origin). */
export function sameOrigin(options: ResolvedConsoleOptions, request: ConsoleRequest): boolean {
  const host = header(request, 'host');
  let origin = header(request, 'origin');
  if (origin === undefined || origin === 'null') {
    const referer = header(request, 'referer');
    if (referer === undefined) return false;
    try {
      origin = new URL(referer).origin;
    } catch {
      return false;
    }
  }
  if (options.trustedOrigins.includes(origin)) return true;
  let parsed: URL;
  try {
    parsed = new URL(origin);
  } catch {
    return false;
  }
  return (
    host !== undefined &&
    (parsed.protocol === 'http:' || parsed.protocol === 'https:') &&
    parsed.host === host
  );
}

/** Nothing cached or framed; only the page's own style and script run (by nonce), never a payload's. */
export function securityHeaders(nonce: string): Record<string, string> {
  return {
    'content-security-policy': `default-src 'none'; style-src 'nonce-${nonce}'; script-src 'nonce-${nonce}'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'same-origin',
  };
}
