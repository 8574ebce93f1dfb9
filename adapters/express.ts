/**
 * Express middleware. Maps a request to a delivery and an outcome to a response; nothing else.
 *
 * ```ts
 * import express from 'express';
 * import { inbox } from 'webhook-inbox/express';
 *
 * const app = express();
 * app.use('/webhooks', inbox({ db: process.env.DATABASE_URL, handle: applyEvent }));
 * // POST /webhooks is a delivery; GET /webhooks/health answers inbox.health() (200, or 503
 * // when Postgres does not answer); other methods on /webhooks are 405; the rest of the app
 * // is untouched.
 * ``` *
 * Slow senders: the inbox reads a body for at most `bodyTimeoutMs` (then 408); the time before
 * the request reaches the middleware is the Node server's. Set `server.headersTimeout` and
 * `server.requestTimeout` (default 300 s) a little above `bodyTimeoutMs` (docs/mounting.md).
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
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

export interface ExpressMountOptions {
  /**
   * The webhook path, relative to where the middleware is mounted: deliveries are `POST` to it,
   * the health probe is `GET <path>/health`, other methods on it are 405, and every other
   * request is passed on with `next()`.
   * @defaultValue the mount path itself (`app.use('/webhooks', inbox(…))` answers `POST
   * /webhooks`); `'/webhooks'` when mounted at the root of the app (`app.use(inbox(…))`);
   * with a route (`app.post('/hooks', inbox(…))`), the route's path.
   */
  path?: string;
}

/** Inbox options and the mount's, or an inbox made by `createInbox`. `TBody` types `event.body`, `DB` the handler's `tx`. */
export type ExpressInboxOptions<TBody = any, DB = any> =
  | (InboxOptions<TBody, DB> & ExpressMountOptions)
  | Inbox;

export interface InboxMiddleware extends RequestHandler {
  /** The core inbox behind this middleware (for `close()`, inspection, the sweeper). */
  readonly inbox: Inbox;
}

/** Express's own answer: its charset handling, ETag and freshness (the health probe, the 405, rare answers). */
function send(res: Response, outcome: Outcome): void {
  res.status(outcome.status).set(outcome.headers).send(responseText(outcome));
}

/**
 * The content types the inbox writes, each already as Express's `res.send` would rewrite it
 * (`; charset=utf-8`): an answer in one of them needs none of that rewriting.
 */
const WRITTEN_AS_IS = new Set([
  'application/json; charset=utf-8',
  'application/problem+json; charset=utf-8',
  'text/plain; charset=utf-8',
]);

/**
 * The answer to a delivery (a POST), written with Node's own API: `res.send` would parse and
 * rewrite the content type and hash the body for an ETag, which means nothing on the answer to
 * a POST (the other adapters send none) and is per-delivery work. `writeHead` merges the
 * headers that earlier middleware set (`X-Powered-By`, CORS, a request id), as `res.send`
 * would. A content type of a `respond` hook's own, a status without a body (204, 205, 304) or
 * a `Transfer-Encoding` set before us are rare: those go through `res.send`.
 */
function answer(res: Response, outcome: Outcome): void {
  const type = outcome.headers['content-type'];
  const status = outcome.status;
  if (
    type === undefined ||
    !WRITTEN_AS_IS.has(type) ||
    status === 204 ||
    status === 205 ||
    status === 304 ||
    res.hasHeader('transfer-encoding')
  ) {
    send(res, outcome);
    return;
  }
  const text = responseText(outcome);
  const headers: Record<string, string | number> = {};
  for (const name in outcome.headers) {
    headers[name === 'content-type' ? 'Content-Type' : name] = outcome.headers[name];
  }
  headers['Content-Length'] = Buffer.byteLength(text);
  res.writeHead(status, headers);
  res.end(text);
}

/**
 * Which of the inbox's endpoints a request is. A route that chose this middleware decides the
 * path; otherwise `path`, else the mount point (`req.baseUrl` is set when mounted under a
 * path), else {@link DEFAULT_ROOT_PATH} at the root of the app.
 */
function endpoint(req: Request, path: string | undefined): Endpoint {
  if (path === undefined && req.route) return routedEndpointOf(req.method, req.path);
  const base = path ?? (req.baseUrl ? '' : DEFAULT_ROOT_PATH);
  return endpointOf(req.method, req.path, base);
}

/**
 * The exact bytes of a body that a parser before the inbox already read, when it kept them:
 * `express.raw()` leaves a Buffer in `req.body`; NestJS with `rawBody: true`, the
 * `express.json({ verify: (req, _res, buf) => { req.rawBody = buf } })` pattern and
 * body-parser look-alikes leave one in `req.rawBody`. A string is not the bytes (it was
 * decoded), so it is not used.
 */
function keptBytes(req: Request): Buffer | undefined {
  if (Buffer.isBuffer(req.body)) return req.body;
  const raw = (req as Request & { rawBody?: unknown }).rawBody;
  return Buffer.isBuffer(raw) ? raw : undefined;
}

/**
 * Express middleware for `app.use('/webhooks', inbox(options))`, `app.use(inbox(options))`
 * (answers at `/webhooks`, or at `path`) or `app.post('/webhooks', inbox(options))`. The second
 * argument gives the mount options to an inbox made by `createInbox`.
 */
export function inbox<DB = any, TBody = any>(
  options: ExpressInboxOptions<TBody, DB>,
  mount: ExpressMountOptions = {},
): InboxMiddleware {
  const { core, base } = mountedInbox(options, mount);
  const middleware = async (req: Request, res: Response, next: NextFunction) => {
    const at = endpoint(req, base);
    if (at === 'pass') return next();
    const answered = notADelivery(core, at);
    if (answered) {
      send(res, await answered);
      return;
    }
    try {
      // Header lists unjoined (`headersDistinct`): a repeated id, key or seq header is refused
      // by the core instead of being read as one joined value.
      let outcome: Outcome;
      const kept = keptBytes(req);
      if (kept) {
        // A parser ran first and kept the bytes, which is all we need.
        outcome = await core.receive({ headers: req.headersDistinct, rawBody: kept });
      } else if (req.body !== undefined || req.readableEnded) {
        throw new RawBodyUnavailableError(
          'Mount the inbox before express.json()/express.urlencoded(), use express.raw({ type: "*/*" }) on its route, or keep the bytes as req.rawBody (NestJS rawBody: true, express.json({ verify })).',
        );
      } else {
        outcome = await core.receiveStream(req.headersDistinct, req);
      }
      answer(res, outcome);
    } catch (err) {
      answer(res, core.outcomeForError(err));
    }
  };
  return Object.assign(middleware, { inbox: core });
}

export { createInbox, Inbox };
