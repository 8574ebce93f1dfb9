/** The console's core, framework-free: every request is authenticated before routing (an unknown path is 401 too). */
import { randomBytes } from 'node:crypto';
import { OperationError } from '../errors.js';
import { ACTIONS, type ActionName, runAction } from './actions.js';
import { createBackend } from './backend.js';
import { parseDeadLetterFilter } from './filters.js';
import { FormError } from './form-error.js';
import { href, html } from './html.js';
import { layout, type PageContext } from './layout.js';
import { type ConsoleOptions, type ResolvedConsoleOptions, resolveConsoleOptions } from './options.js';
import {
  deadLettersPage,
  eventPage,
  ignoredPage,
  keyPage,
  keysPage,
  loginPage,
  messagePage,
  overviewPage,
} from './pages.js';
import type { ConsoleRequest, ConsoleResponse } from './request.js';
import {
  authenticate,
  CsrfTokens,
  clientAddress,
  hostAllowed,
  LoginThrottle,
  type Principal,
  SESSION_COOKIE,
  Sessions,
  sameOrigin,
  secureRequest,
  securityHeaders,
  tokenMatches,
} from './security.js';

/** The most a form body may hold (a bulk selection of 1000 ids fits). */
export const MAX_FORM_BYTES = 1024 * 1024;

export interface Console {
  readonly options: ResolvedConsoleOptions;
  handle(request: ConsoleRequest): Promise<ConsoleResponse>;
}

function decodeSegment(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

/**
 * Creates the console over an inbox (or handler-free operations); `console.handle(request)` answers.
 * Throws InboxOptionsError without `authorize`, `token` or `insecure: true`.
 */
export function createConsole(input: ConsoleOptions): Console {
  const options = resolveConsoleOptions(input);
  const backend = createBackend(options);
  const csrf = new CsrfTokens(options.secret);
  const sessions = new Sessions(options.sessionTtlMs, options.secret);
  const throttle = new LoginThrottle();

  function respond(
    status: number,
    nonce: string,
    body: string,
    extra: Record<string, string | string[]> = {},
  ): ConsoleResponse {
    return {
      status,
      headers: { 'content-type': 'text/html; charset=utf-8', ...securityHeaders(nonce), ...extra },
      body,
    };
  }

  function message(
    status: number,
    ctx: PageContext,
    title: string,
    text: string,
    extra?: Record<string, string>,
  ): ConsoleResponse {
    return respond(status, ctx.nonce, messagePage(ctx, title, text), extra);
  }

  function redirect(location: string, extra: Record<string, string | string[]> = {}): ConsoleResponse {
    return { status: 303, headers: { location, 'cache-control': 'no-store', ...extra }, body: '' };
  }

  function problem(
    status: number,
    title: string,
    detail: string,
    field: string,
    extra: Record<string, string> = {},
  ): ConsoleResponse {
    return {
      status,
      headers: {
        'content-type': 'application/problem+json; charset=utf-8',
        'cache-control': 'no-store',
        ...extra,
      },
      body: JSON.stringify({ type: 'about:blank', title, status, detail, field }),
    };
  }

  function cookie(request: ConsoleRequest, base: string, value: string, maxAge: number): string {
    const secure = secureRequest(options, request) ? '; Secure' : '';
    return `${SESSION_COOKIE}=${value}; Path=${base || '/'}; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${secure}`;
  }

  async function handle(request: ConsoleRequest): Promise<ConsoleResponse> {
    // First: a rebinding page sends its own name as Host, which passes any Origin-against-Host check.
    if (!hostAllowed(options, request)) {
      options.logger.warn(
        { console: 'host', host: request.headers.host },
        'webhook-inbox console: a request for another host was refused',
      );
      return problem(
        403,
        'Forbidden',
        'this console does not answer to that host (see `allowedHosts`)',
        'host',
      );
    }
    const nonce = randomBytes(16).toString('base64');
    const base = request.basePath ?? '';
    const anonymous: PageContext = {
      base,
      nonce,
      readOnly: options.readOnly,
      appliesHere: backend.appliesHere,
    };
    const url = new URL(
      request.url.startsWith('/') ? request.url : `/${request.url}`,
      'http://console.invalid',
    );
    const path = url.pathname.replace(/\/+$/, '') || '/';
    const method = request.method.toUpperCase();

    let principal: Principal | undefined;
    try {
      principal = await authenticate(options, sessions, request);
    } catch (err) {
      options.logger.error({ err }, 'webhook-inbox console: the authorize hook threw');
      return message(500, anonymous, 'Error', 'The console could not check who you are.');
    }

    // The only pages answered without credentials.
    if (options.token !== undefined && path === '/login') {
      if (method === 'GET') return respond(200, nonce, loginPage(anonymous, false));
      if (method === 'POST') {
        if (!sameOrigin(options, request))
          return message(403, anonymous, 'Refused', 'Cross-origin request refused.');
        const address = clientAddress(options, request);
        const wait = throttle.retryAfter(address);
        if (wait > 0) {
          options.logger.warn({ console: 'login', address }, 'webhook-inbox console: a login was throttled');
          return problem(
            429,
            'Too Many Requests',
            `too many failed logins from this address; try again in ${wait} s`,
            'token',
            { 'retry-after': String(wait) },
          );
        }
        const given = new URLSearchParams(request.body ?? '').get('token') ?? '';
        if (!tokenMatches(options, given)) {
          throttle.failed(address);
          options.logger.warn(
            { console: 'login', address },
            'webhook-inbox console: a login with a wrong token',
          );
          return respond(401, nonce, loginPage(anonymous, true));
        }
        options.logger.info({ console: 'login', who: 'token' }, 'webhook-inbox console: login');
        return redirect(`${base}/`, {
          'set-cookie': cookie(request, base, sessions.create(), Math.floor(options.sessionTtlMs / 1000)),
        });
      }
    }

    if (!principal) {
      const challenge = { 'www-authenticate': 'Bearer realm="webhook-inbox console"' };
      return options.token !== undefined
        ? respond(401, nonce, loginPage(anonymous, false), challenge)
        : respond(401, nonce, layout(anonymous, 'Unauthorized', html`<h1>Unauthorized</h1>`), challenge);
    }

    const ctx: PageContext = { ...anonymous, user: principal.name, csrf: csrf.for(principal) };
    try {
      if (method === 'GET' || method === 'HEAD') {
        const shown = await page(ctx, path, url.searchParams);
        return typeof shown === 'string' ? respond(200, nonce, shown) : shown;
      }
      if (method !== 'POST')
        return message(405, ctx, 'Method not allowed', `${method} is not allowed here.`, {
          allow: 'GET, POST',
        });

      const form = new URLSearchParams(request.body ?? '');
      if (!sameOrigin(options, request) || !csrf.verify(principal, form.get('csrf') ?? undefined)) {
        options.logger.warn(
          { console: path, who: principal.name },
          'webhook-inbox console: a POST without a same-origin CSRF token was refused',
        );
        return message(
          403,
          ctx,
          'Refused',
          'This form did not come from the console (cross-origin, or an expired page: reload it).',
        );
      }
      if (path === '/logout') {
        // Revoked, not only cleared: a copy of the cookie is refused too.
        if (principal.session !== undefined) sessions.revoke(principal.session);
        options.logger.info({ console: 'logout', who: principal.name }, 'webhook-inbox console: logout');
        return redirect(
          options.token !== undefined ? `${base}/login` : `${base}/`,
          principal.via === 'session' ? { 'set-cookie': cookie(request, base, '', 0) } : {},
        );
      }
      const action = /^\/actions\/([a-z-]+)$/.exec(path)?.[1];
      if (!action || !(ACTIONS as readonly string[]).includes(action))
        return message(404, ctx, 'Not found', 'No such action.');
      if (options.readOnly) return message(403, ctx, 'Read-only', 'This console is read-only.');
      return respond(
        200,
        nonce,
        await runAction(action as ActionName, form, ctx, principal, backend, options),
      );
    } catch (err) {
      if (err instanceof FormError) return message(400, ctx, 'Bad request', err.message);
      if (err instanceof OperationError) {
        const found = err.code !== 'not-found';
        return message(found ? 409 : 404, ctx, found ? 'Refused' : 'Not found', err.message);
      }
      options.logger.error(
        { err, console: path, who: principal.name },
        'webhook-inbox console: a request failed',
      );
      return message(
        500,
        ctx,
        'Error',
        'The console could not read or change the inbox (see the server log).',
      );
    }
  }

  async function page(
    ctx: PageContext,
    path: string,
    params: URLSearchParams,
  ): Promise<string | ConsoleResponse> {
    const ops = await backend.ops();
    const segments = path.split('/').slice(1).map(decodeSegment);
    if (segments.some((s) => s === undefined)) throw new FormError('the path is not valid percent-encoding');
    const [first, source, name, extra] = segments as string[];
    if (path === '/') {
      const [status, perMinute, blocked, causes, groups] = await Promise.all([
        ops.status(),
        backend.processedPerMinute(),
        ops.keys({ blocked: true, limit: 20 }),
        ops.deadGroups(),
        ops.groups(20),
      ]);
      return overviewPage(ctx, status, perMinute, blocked, causes.slice(0, 20), groups);
    }
    if (path === '/dead-letters') {
      const { query, filter } = parseDeadLetterFilter(params);
      return deadLettersPage(ctx, query, await ops.deadLetters({ ...filter, limit: 500 }));
    }
    if (path === '/ignored') {
      const type = params.get('type') ?? undefined;
      const [types, list] = await Promise.all([ops.ignoredTypes(), ops.ignored({ type, limit: 500 })]);
      return ignoredPage(ctx, type, types, list);
    }
    if (first === 'events' && source && name && extra === undefined) {
      return eventPage(ctx, await ops.deadLetter(name, source));
    }
    if (path === '/keys') {
      const blocked = params.get('blocked') === '1';
      return keysPage(ctx, blocked, await ops.keys({ blocked, limit: 500 }));
    }
    if (first === 'keys' && source && name && extra === undefined) {
      const detail = await ops.key(name, source);
      if (!detail)
        throw new OperationError(
          'not-found',
          `no key ${JSON.stringify(name)} in source ${JSON.stringify(source)}`,
        );
      return keyPage(ctx, detail);
    }
    if (path === '/search') {
      const id = params.get('id')?.trim();
      if (!id) throw new FormError('field `id` is required');
      const found = await ops.deadLetter(id, ops.source).catch((err) => {
        if (err instanceof OperationError && err.code === 'ambiguous') return undefined;
        throw err;
      });
      if (found) return redirect(href(ctx.base, 'events', found.source, found.id));
      const { sources } = await ops.status();
      const links = [];
      for (const s of sources) {
        const hit = await ops.deadLetter(id, s).catch((err) => {
          if (err instanceof OperationError && err.code === 'not-found') return undefined;
          throw err;
        });
        if (hit) links.push(html`<li><a href="${href(ctx.base, 'events', s, id)}">${s}</a></li>`);
      }
      return layout(
        ctx,
        'Search',
        html`<h1>Event <code>${id}</code> is in several sources</h1><ul>${links}</ul>`,
      );
    }
    return message(404, ctx, 'Not found', 'No such page.');
  }

  return { options, handle };
}
