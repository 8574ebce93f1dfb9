/**
 * Express middleware. Maps a request to a delivery and an outcome to a response; nothing else.
 *
 * ```ts
 * import express from 'express';
 * import { inbox } from 'webhook-inbox/express';
 *
 * const app = express();
 * app.use('/webhooks', inbox({ db: process.env.DATABASE_URL, handle: applyEvent }));
 * // GET /webhooks/health answers inbox.health(): 200 when Postgres answers, else 503.
 * ```
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { RawBodyUnavailableError } from '../src/errors.js';
import { createInbox, Inbox } from '../src/inbox.js';
import type { InboxOptions } from '../src/options.js';
import type { Outcome } from '../src/outcome.js';

export type ExpressInboxOptions = InboxOptions | Inbox;

export interface InboxMiddleware extends RequestHandler {
  /** The core inbox behind this middleware (for `close()`, inspection, the sweeper). */
  readonly inbox: Inbox;
}

function send(res: Response, outcome: Outcome): void {
  res.status(outcome.status).set(outcome.headers).send(JSON.stringify(outcome.body));
}

/** Express middleware for `app.use(path, inbox(options))` or `app.post(path, inbox(options))`. */
export function inbox(options: ExpressInboxOptions): InboxMiddleware {
  const core = options instanceof Inbox ? options : createInbox(options);
  const middleware = async (req: Request, res: Response, next: NextFunction) => {
    if (req.method === 'GET' && req.path === '/health') {
      send(res, await core.healthOutcome().catch((err) => core.outcomeForError(err)));
      return;
    }
    if (req.method !== 'POST') return next();
    try {
      let outcome: Outcome;
      if (Buffer.isBuffer(req.body)) {
        // express.raw() ran first: it kept the bytes, which is all we need.
        outcome = await core.receive({ headers: req.headers, rawBody: req.body });
      } else if (req.body !== undefined || req.readableEnded) {
        throw new RawBodyUnavailableError(
          'Mount the inbox before express.json()/express.urlencoded(), or use express.raw({ type: "*/*" }) on its route.',
        );
      } else {
        outcome = await core.receiveStream(req.headers, req);
      }
      send(res, outcome);
    } catch (err) {
      send(res, core.outcomeForError(err));
    }
  };
  return Object.assign(middleware, { inbox: core });
}

export { createInbox, Inbox };
