/**
 * Who is asking, and whether a POST really comes from the console's own page: authentication
 * (the `authorize` hook, a bearer token, or the session cookie the login form sets), CSRF
 * (a same-origin check AND a token bound to the user), and the headers every page carries.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { isLoopback, type ResolvedConsoleOptions } from './options.js';
import { type ConsoleRequest, header } from './request.js';

export const SESSION_COOKIE = 'webhook_inbox_console';

/** Who is asking, once authenticated; `via` tells whether a session cookie may be cleared. */
export interface Principal {
  readonly name: string;
  readonly via: 'authorize' | 'bearer' | 'session' | 'insecure';
}

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The cookie's value: derived from the token, so the token itself never sits in a cookie. */
export function sessionValue(token: string): string {
  return createHmac('sha256', token).update('webhook-inbox console session').digest('base64url');
}

export function cookies(request: ConsoleRequest): Map<string, string> {
  const jar = new Map<string, string>();
  for (const part of (header(request, 'cookie') ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0) jar.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  return jar;
}

/** The token a login form was given checks out. */
export function tokenMatches(options: ResolvedConsoleOptions, given: string): boolean {
  return options.token !== undefined && sameSecret(given, options.token);
}

/** The principal of a request, or undefined (401). The hook's exceptions propagate (500). */
export async function authenticate(
  options: ResolvedConsoleOptions,
  request: ConsoleRequest,
): Promise<Principal | undefined> {
  if (options.token !== undefined) {
    const auth = header(request, 'authorization') ?? '';
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    if (bearer && sameSecret(bearer[1]!, options.token)) return { name: 'token', via: 'bearer' };
    const session = cookies(request).get(SESSION_COOKIE);
    if (session && sameSecret(session, sessionValue(options.token))) return { name: 'token', via: 'session' };
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

/**
 * CSRF tokens: an HMAC of the user's name under a key made when the console starts. A page
 * embeds the token in each of its forms; a POST must carry it back. Stateless, so any number
 * of tabs work; a restart invalidates open forms (the operator reloads).
 */
export class CsrfTokens {
  readonly #key = randomBytes(32);

  for(principal: Principal): string {
    return createHmac('sha256', this.#key).update(`csrf:${principal.name}`).digest('base64url');
  }

  verify(principal: Principal, given: string | undefined): boolean {
    return given !== undefined && sameSecret(given, this.for(principal));
  }
}

/**
 * The POST comes from a page of this console's origin: its Origin (or, when a browser sends
 * none, its Referer) names the Host it was sent to, or a trusted origin. A request with
 * neither is refused: every browser this console supports sends Origin on a form POST.
 */
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

/**
 * Headers on every console response: nothing is cached or framed, and only the page's own
 * inline style and script (by nonce) run; a payload that escaped its escaping still could not.
 */
export function securityHeaders(nonce: string): Record<string, string> {
  return {
    'content-security-policy': `default-src 'none'; style-src 'nonce-${nonce}'; script-src 'nonce-${nonce}'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'same-origin',
  };
}
