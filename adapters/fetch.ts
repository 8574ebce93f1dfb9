/**
 * The fetch-standard entry: a `(request: Request) => Promise<Response>` handler, for every
 * runtime and framework that speaks `Request`/`Response` (Next.js App Router route handlers,
 * Hono, Remix, SvelteKit, Bun, Deno, Cloudflare-style `fetch` exports, Node via
 * `@hono/node-server`). Maps a request to a delivery and an outcome to a response; nothing else.
 *
 * ```ts
 * // app/webhooks/route.ts (Next.js App Router)
 * import { handler } from 'webhook-inbox/fetch';
 *
 * const webhooks = handler({ db: process.env.DATABASE_URL, handle: applyEvent });
 * export const POST = webhooks;
 * export const GET = webhooks; // GET /webhooks/health
 * ```
 *
 * The request's body stream is read by the inbox (bounded by `maxBodyBytes` and
 * `bodyTimeoutMs`), so the bytes the sender signed are the bytes verified and hashed. A
 * framework that already read the body must hand over the original `Request` (or a clone).
 */

import { type Endpoint, endpointOf, routedEndpointOf } from '../src/delivery/mount-path.js';
import { RawBodyUnavailableError } from '../src/errors.js';
import { createInbox, Inbox } from '../src/inbox/inbox.js';
import type { InboxOptions } from '../src/options/options.js';
import { type Outcome, problem, responseText } from '../src/outcome.js';
import { mountedInbox, notADelivery } from './mount.js';

export interface FetchMountOptions {
  /**
   * The webhook path, matched against the request URL's pathname: deliveries are `POST` to it,
   * the health probe is `GET <path>/health`, other methods on it are 405, and any other path is
   * answered 404 (or passed on by the Hono middleware).
   * @defaultValue none: the router in front already chose this handler (a Next.js route file,
   * `app.post('/webhooks', …)`), so every POST is a delivery and a GET ending in `/health` is
   * the probe.
   */
  path?: string;
}

/** Inbox options and the mount's, or an inbox made by `createInbox`. `TBody` types `event.body`, `DB` the handler's `tx`. */
export type FetchInboxOptions<TBody = any, DB = any> = (InboxOptions<TBody, DB> & FetchMountOptions) | Inbox;

/** A fetch handler: `Request` in, `Response` out, with the core inbox attached. */
export interface InboxFetchHandler {
  (request: Request): Promise<Response>;
  /** The core inbox behind this handler (for `close()`, inspection, the sweeper). */
  readonly inbox: Inbox;
}

/** An outcome as a fetch `Response`: its status, its headers, its JSON body. */
export function responseOf(outcome: Outcome): Response {
  return new Response(responseText(outcome), { status: outcome.status, headers: outcome.headers });
}

/** Which of the inbox's endpoints a request is; `undefined` when its path is not the inbox's. */
export function fetchEndpoint(request: Request, base: string | undefined): Endpoint {
  const pathname = new URL(request.url).pathname;
  return base === undefined
    ? routedEndpointOf(request.method, pathname)
    : endpointOf(request.method, pathname, base);
}

/**
 * Hands a fetch `Request` to the inbox and returns its outcome (not a Response): the building
 * block of {@link handler} and of the Hono middleware. A body already read is refused (500
 * problem) rather than guessed at.
 */
export async function receiveRequest(core: Inbox, request: Request): Promise<Outcome> {
  try {
    if (request.bodyUsed) {
      throw new RawBodyUnavailableError(
        'Hand the inbox the Request before anything reads its body (request.json(), request.text()), or a request.clone() made before.',
      );
    }
    // Fetch joins a repeated header's values with ", " and cannot tell them apart: a repeated
    // X-Seq is then malformed (400), but a repeated id or key reads as one value with a comma.
    // The Node adapters (Express, Koa, Fastify) see the repetition and refuse it.
    const headers: Record<string, string> = {};
    request.headers.forEach((value, name) => {
      headers[name] = value;
    });
    // A web ReadableStream is async-iterable of Uint8Array (Node 20, Bun, Deno).
    const body = (request.body ?? []) as AsyncIterable<Uint8Array>;
    return await core.receiveStream(headers, body);
  } catch (err) {
    return core.outcomeForError(err);
  }
}

function notFound(): Outcome {
  const outcome = problem('invalid', 404, 'No webhook endpoint at this path.');
  return { ...outcome, body: { ...outcome.body, title: 'Not found' } };
}

/**
 * A fetch handler for the inbox: `POST` is a delivery, `GET …/health` the health probe, any
 * other method 405; with `path`, a request to another path is 404. The second argument gives
 * the mount options to an inbox made by `createInbox`.
 *
 * ```ts
 * import { handler } from 'webhook-inbox/fetch';
 * Bun.serve({ fetch: handler({ db: process.env.DATABASE_URL, handle, path: '/webhooks' }) });
 * ```
 */
export function handler<DB = any, TBody = any>(
  options: FetchInboxOptions<TBody, DB>,
  mount: FetchMountOptions = {},
): InboxFetchHandler {
  const { core, base } = mountedInbox(options, mount);
  const fetchHandler = async (request: Request): Promise<Response> => {
    const at = fetchEndpoint(request, base);
    if (at === 'pass') return responseOf(notFound());
    const answered = notADelivery(core, at);
    if (answered) {
      return responseOf(await answered);
    }
    return responseOf(await receiveRequest(core, request));
  };
  return Object.assign(fetchHandler, { inbox: core });
}

export { createInbox, Inbox };
