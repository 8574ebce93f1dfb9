/**
 * Fastify plugin. Maps a request to a delivery and an outcome to a response; nothing else.
 *
 * ```ts
 * import Fastify from 'fastify';
 * import { inbox } from 'webhook-inbox/fastify';
 *
 * const app = Fastify();
 * await app.register(inbox, { prefix: '/webhooks', db: process.env.DATABASE_URL, handle: applyEvent });
 * // POST /webhooks is a delivery, GET /webhooks/health answers inbox.health(), other methods
 * // on /webhooks are 405; the app's other routes (and their JSON parser) are untouched.
 * ```
 *
 * Without `prefix`, the plugin answers at `/webhooks` when registered on the root app, and at
 * the prefix of the context it is registered in otherwise (the same rule as the Express and
 * Koa adapters).
 *
 * Slow senders: the inbox reads a body for at most `bodyTimeoutMs` (then 408); the time before
 * the request reaches the route is Fastify's. Its `requestTimeout` and `connectionTimeout`
 * options (0, none, by default) should be set a little above `bodyTimeoutMs` (docs/mounting.md).
 *
 * Two layers, on purpose. The outer plugin is wrapped with fastify-plugin (name, `fastify: '5.x'`)
 * so that `app.webhookInbox` and the `onClose` hook reach the app that registered it. The
 * route lives in an inner, encapsulated plugin: its catch-all content-type parser (which
 * leaves the bytes unread for the inbox) must not replace the app's JSON parser, and a
 * fastify-plugin'ed plugin would ignore `prefix`, so the inner one gets it.
 */
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { InboxOptionsError } from '../src/errors.js';
import { createInbox, Inbox } from '../src/inbox.js';
import { checkPath, DEFAULT_ROOT_PATH } from '../src/mount-path.js';
import type { InboxOptions } from '../src/options.js';
import { methodNotAllowed, type Outcome } from '../src/outcome.js';
import type { BodyStream } from '../src/receive/raw-body.js';

export interface FastifyMountOptions {
  /**
   * The webhook path (Fastify's own `prefix`; `path` is accepted as the same option, as on the
   * other adapters): deliveries are `POST` to it, the health probe is `GET <prefix>/health`,
   * other methods on it are 405.
   * @defaultValue `'/webhooks'` on the root app; inside a prefixed context, that prefix itself
   */
  prefix?: string;
  /** The same as `prefix`. */
  path?: string;
}

/**
 * Inbox options, or `{ inbox }` to serve an inbox made by `createInbox` (not closed by
 * Fastify); with the mount options either way.
 */
export type FastifyInboxOptions = (InboxOptions | { inbox: Inbox }) & FastifyMountOptions;

/** Methods other than POST that get 405 on the webhook path (HEAD follows GET in Fastify). */
const OTHER_METHODS = ['GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'] as const;

declare module 'fastify' {
  interface FastifyInstance {
    /** The inbox registered by `webhook-inbox/fastify` (the first one, if several are). */
    webhookInbox: Inbox;
  }
}

const EMPTY = Buffer.alloc(0);

function send(reply: FastifyReply, outcome: Outcome): FastifyReply {
  return reply.code(outcome.status).headers(outcome.headers).send(JSON.stringify(outcome.body));
}

const plugin: FastifyPluginAsync<FastifyInboxOptions> = async (app, options) => {
  const { prefix: givenPrefix, path, ...rest } = options;
  if (givenPrefix !== undefined && path !== undefined && givenPrefix !== path) {
    throw new InboxOptionsError('path', 'is the same option as `prefix`: give one of them');
  }
  const prefix = checkPath(givenPrefix ?? path, givenPrefix !== undefined ? 'prefix' : 'path');
  const core =
    'inbox' in rest && rest.inbox instanceof Inbox ? rest.inbox : createInbox(rest as InboxOptions);
  if (!app.hasDecorator('webhookInbox')) app.decorate('webhookInbox', core);
  // Close only what this plugin created: an inbox passed in may be shared with a worker or CLI.
  if (core !== (rest as { inbox?: Inbox }).inbox) app.addHook('onClose', () => core.close());

  await app.register(
    async (scope: FastifyInstance) => {
      // Scoped to this encapsulated context: the app's own parsers are untouched. The body
      // stays a stream, read by the core with the same `maxBodyBytes` bound (and the same
      // 413 problem+json) as on Express and Koa; Fastify's `bodyLimit` only applies to the
      // parsers that buffer for it, so it plays no part here.
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload));
      scope.get('/health', async (_request: FastifyRequest, reply: FastifyReply) =>
        send(reply, await core.healthOutcome().catch((err) => core.outcomeForError(err))),
      );
      scope.route({
        method: [...OTHER_METHODS],
        url: '/',
        handler: async (_request: FastifyRequest, reply: FastifyReply) => send(reply, methodNotAllowed()),
      });
      scope.post('/', async (request: FastifyRequest, reply: FastifyReply) => {
        try {
          // No body at all (Content-Length: 0, no type): Fastify runs no parser.
          const stream = request.body as BodyStream | undefined;
          // Header lists unjoined (`headersDistinct` of the Node request): a repeated id, key or
          // seq header is refused by the core instead of being read as one joined value.
          const headers = request.raw.headersDistinct;
          const outcome = stream
            ? await core.receiveStream(headers, stream)
            : await core.receive({ headers, rawBody: EMPTY });
          return send(reply, outcome);
        } catch (err) {
          return send(reply, core.outcomeForError(err));
        }
      });
    },
    // Registered on the root app without a prefix, it must not take the root path `/`.
    { prefix: prefix ?? (app.prefix === '' ? DEFAULT_ROOT_PATH : undefined) },
  );
};

/** The Fastify plugin: `app.register(inbox, { prefix: '/webhooks', db, handle })`. */
export const inbox = fp(plugin, { name: 'webhook-inbox', fastify: '5.x' });
export default inbox;

export { createInbox, Inbox };
