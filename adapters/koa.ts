/**
 * Koa middleware. Maps a request to a delivery and an outcome to a response; nothing else.
 *
 * ```ts
 * import Koa from 'koa';
 * import { inbox } from 'webhook-inbox/koa';
 *
 * const app = new Koa();
 * app.use(inbox({ path: '/webhooks', db: process.env.DATABASE_URL, handle: applyEvent }));
 * // or, with @koa/router: router.post('/webhooks', inbox({ db, handle: applyEvent }))
 * // GET /webhooks/health answers inbox.health() (with a router: router.get('/webhooks/health', same middleware)).
 * ```
 */
import type { Context, Middleware, Next } from 'koa';
import { RawBodyUnavailableError } from '../src/errors.js';
import { createInbox, Inbox } from '../src/inbox.js';
import type { InboxOptions } from '../src/options.js';
import type { Outcome } from '../src/outcome.js';

export interface KoaMountOptions {
  /**
   * Answer POSTs to this exact path (a trailing slash is ignored) and pass everything else on.
   * Leave it out when a router already chose the route. @defaultValue every POST that reaches it
   */
  path?: string;
}

export type KoaInboxOptions = (InboxOptions & KoaMountOptions) | Inbox;

export interface KoaInboxMiddleware extends Middleware {
  /** The core inbox behind this middleware (for `close()`, inspection, the sweeper). */
  readonly inbox: Inbox;
}

const HINT =
  'Mount the inbox before koa-bodyparser/@koa/bodyparser (app.use order), or give the webhook route its own router without a body parser.';

function send(ctx: Context, outcome: Outcome): void {
  ctx.status = outcome.status;
  ctx.set(outcome.headers as Record<string, string>);
  ctx.body = JSON.stringify(outcome.body);
}

/**
 * `GET <path>/health` with `path`; without it, a GET a router sent here on a route ending in
 * `/health` (`router.get('/webhooks/health', middleware)`), never the app's own routes.
 */
function isHealthPath(ctx: Context, exact: string | undefined): boolean {
  const path = ctx.path.replace(/\/+$/, '');
  if (exact !== undefined) return path === `${exact}/health`;
  return (ctx as { _matchedRoute?: unknown })._matchedRoute !== undefined && path.endsWith('/health');
}

/** Koa middleware for `app.use(inbox({ path, … }))` or `router.post(path, inbox(…))`. */
export function inbox(options: KoaInboxOptions, mount: KoaMountOptions = {}): KoaInboxMiddleware {
  let core: Inbox;
  let path = mount.path;
  if (options instanceof Inbox) core = options;
  else {
    const { path: ownPath, ...inboxOptions } = options;
    path ??= ownPath;
    core = createInbox(inboxOptions);
  }
  const exact = path?.replace(/\/+$/, '') || undefined;
  const middleware = async (ctx: Context, next: Next) => {
    if (ctx.method === 'GET' && isHealthPath(ctx, exact)) {
      send(ctx, await core.healthOutcome().catch((err) => core.outcomeForError(err)));
      return;
    }
    if (ctx.method !== 'POST') return next();
    if (exact !== undefined && ctx.path.replace(/\/+$/, '') !== exact) return next();
    try {
      const body = (ctx.request as { body?: unknown }).body;
      if (Buffer.isBuffer(body)) {
        // A raw body parser ran first and kept the bytes, which is all we need.
        send(ctx, await core.receive({ headers: ctx.headers, rawBody: body }));
      } else if (ctx.req.readableDidRead || ctx.req.readableEnded) {
        // A body parser consumed the stream. Its `ctx.request.rawBody` is a decoded string,
        // not the bytes the sender signed, so refuse clearly instead of hashing something else.
        throw new RawBodyUnavailableError(HINT);
      } else {
        send(ctx, await core.receiveStream(ctx.headers, ctx.req));
      }
    } catch (err) {
      send(ctx, core.outcomeForError(err));
    }
  };
  return Object.assign(middleware, { inbox: core });
}

export { createInbox, Inbox };
