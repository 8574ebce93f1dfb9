/**
 * Koa middleware. Maps a request to a delivery and an outcome to a response; nothing else.
 *
 * ```ts
 * import Koa from 'koa';
 * import { inbox } from 'webhook-inbox/koa';
 *
 * const app = new Koa();
 * app.use(inbox({ path: '/webhooks', db: process.env.DATABASE_URL, handle: applyEvent }));
 * // POST /webhooks is a delivery, GET /webhooks/health answers inbox.health(), other methods
 * // on /webhooks are 405, and every other request goes on to the rest of the app.
 * // With @koa/router: router.post('/webhooks', inbox({ db, handle: applyEvent }))
 * // (and router.get('/webhooks/health', same middleware) for the probe).
 * ``` *
 * Slow senders: the inbox reads a body for at most `bodyTimeoutMs` (then 408); the time before
 * the request reaches the middleware is the Node server's. Set `server.headersTimeout` and
 * `server.requestTimeout` (default 300 s) a little above `bodyTimeoutMs` (docs/mounting.md).
 */
import type { Context, Middleware, Next } from 'koa';
import {
  DEFAULT_ROOT_PATH,
  type Endpoint,
  endpointOf,
  routedEndpointOf,
} from '../src/delivery/mount-path.js';
import { RawBodyUnavailableError } from '../src/errors.js';
import { createInbox, Inbox } from '../src/inbox/inbox.js';
import type { InboxOptions } from '../src/options/options.js';
import { type Outcome, responseText } from '../src/outcome.js';
import { mountedInbox, notADelivery } from './mount.js';

export interface KoaMountOptions {
  /**
   * The webhook path: deliveries are `POST` to it (a trailing slash is ignored), the health
   * probe is `GET <path>/health`, other methods on it are 405, and every other request is
   * passed on with `next()`.
   * @defaultValue `'/webhooks'`; with a router (`router.post('/hooks', inbox(…))`), the route's
   * path; under koa-mount, the mount path itself
   */
  path?: string;
}

/** Inbox options and the mount's, or an inbox made by `createInbox`. `TBody` types `event.body`, `DB` the handler's `tx`. */
export type KoaInboxOptions<TBody = any, DB = any> = (InboxOptions<TBody, DB> & KoaMountOptions) | Inbox;

export interface KoaInboxMiddleware extends Middleware {
  /** The core inbox behind this middleware (for `close()`, inspection, the sweeper). */
  readonly inbox: Inbox;
}

const HINT =
  'Mount the inbox before koa-bodyparser/@koa/bodyparser (app.use order), or give the webhook route its own router without a body parser.';

function send(ctx: Context, outcome: Outcome): void {
  ctx.status = outcome.status;
  ctx.set(outcome.headers as Record<string, string>);
  ctx.body = responseText(outcome);
}

/**
 * Which of the inbox's endpoints a request is. A router route that chose this middleware
 * decides the path; otherwise `path`, else the koa-mount point, else {@link DEFAULT_ROOT_PATH}.
 */
function endpoint(ctx: Context, path: string | undefined): Endpoint {
  const routed = (ctx as { _matchedRoute?: unknown })._matchedRoute !== undefined;
  if (path === undefined && routed) return routedEndpointOf(ctx.method, ctx.path);
  const mounted = (ctx as { mountPath?: unknown }).mountPath !== undefined;
  return endpointOf(ctx.method, ctx.path, path ?? (mounted ? '' : DEFAULT_ROOT_PATH));
}

/** Koa middleware for `app.use(inbox({ path, … }))` or `router.post(path, inbox(…))`. */
export function inbox<DB = any, TBody = any>(
  options: KoaInboxOptions<TBody, DB>,
  mount: KoaMountOptions = {},
): KoaInboxMiddleware {
  const { core, base } = mountedInbox(options, mount);
  const middleware = async (ctx: Context, next: Next) => {
    const at = endpoint(ctx, base);
    if (at === 'pass') return next();
    const answered = notADelivery(core, at);
    if (answered) {
      send(ctx, await answered);
      return;
    }
    try {
      // Header lists unjoined (`headersDistinct` of the Node request): a repeated id, key or
      // seq header is refused by the core instead of being read as one joined value.
      const body = (ctx.request as { body?: unknown }).body;
      if (Buffer.isBuffer(body)) {
        // A raw body parser ran first and kept the bytes, which is all we need.
        send(ctx, await core.receive({ headers: ctx.req.headersDistinct, rawBody: body }));
      } else if (ctx.req.readableDidRead || ctx.req.readableEnded) {
        // A body parser consumed the stream. Its `ctx.request.rawBody` is a decoded string,
        // not the bytes the sender signed, so refuse clearly instead of hashing something else.
        throw new RawBodyUnavailableError(HINT);
      } else {
        send(ctx, await core.receiveStream(ctx.req.headersDistinct, ctx.req));
      }
    } catch (err) {
      send(ctx, core.outcomeForError(err));
    }
  };
  return Object.assign(middleware, { inbox: core });
}

export { createInbox, Inbox };
