/**
 * Hono middleware, on top of the fetch-standard entry (adapters/fetch.ts). Maps a request to a
 * delivery and an outcome to a response; nothing else. Runs wherever Hono runs (Node with
 * `@hono/node-server`, Bun, Deno, workers).
 *
 * ```ts
 * import { Hono } from 'hono';
 * import { inbox } from 'webhook-inbox/hono';
 *
 * const app = new Hono();
 * app.use('/webhooks/*', inbox({ db: process.env.DATABASE_URL, handle: applyEvent, path: '/webhooks' }));
 * // or on a route: app.post('/webhooks', inbox(…)); app.get('/webhooks/health', inbox(…))
 * ```
 *
 * With `path`, the middleware answers `POST <path>`, `GET <path>/health` and 405 for other
 * methods on the path, and passes every other request on with `next()`. Without it, the route
 * that chose the middleware decides (every POST is a delivery).
 */
import type { MiddlewareHandler } from 'hono';
import { createInbox, Inbox } from '../src/inbox/inbox.js';
import type { InboxOptions } from '../src/options/options.js';
import { fetchEndpoint, receiveRequest, responseOf } from './fetch.js';
import { mountedInbox, notADelivery } from './mount.js';

export interface HonoMountOptions {
  /**
   * The webhook path (the full path, as Hono matches it): deliveries are `POST` to it, the
   * health probe is `GET <path>/health`, other methods on it are 405, and every other request
   * is passed on with `next()`.
   * @defaultValue none: the route that chose the middleware decides.
   */
  path?: string;
}

/** Inbox options and the mount's, or an inbox made by `createInbox`. `TBody` types `event.body`, `DB` the handler's `tx`. */
export type HonoInboxOptions<TBody = any, DB = any> = (InboxOptions<TBody, DB> & HonoMountOptions) | Inbox;

export interface InboxHonoMiddleware extends MiddlewareHandler {
  /** The core inbox behind this middleware (for `close()`, inspection, the sweeper). */
  readonly inbox: Inbox;
}

/**
 * Hono middleware for `app.use(inbox({ …, path: '/webhooks' }))` or
 * `app.post('/webhooks', inbox(options))`. The second argument gives the mount options to an
 * inbox made by `createInbox`.
 */
export function inbox<DB = any, TBody = any>(
  options: HonoInboxOptions<TBody, DB>,
  mount: HonoMountOptions = {},
): InboxHonoMiddleware {
  const { core, base } = mountedInbox(options, mount);
  const middleware: MiddlewareHandler = async (c, next) => {
    const at = fetchEndpoint(c.req.raw, base);
    if (at === 'pass') return next();
    const answered = notADelivery(core, at);
    if (answered) {
      return responseOf(await answered);
    }
    // `c.req.raw` is the untouched Request: Hono's own body helpers cache what they read, but
    // never consume the raw stream unless a validator or handler before this one did.
    return responseOf(await receiveRequest(core, c.req.raw));
  };
  return Object.assign(middleware, { inbox: core });
}

export { createInbox, Inbox };
