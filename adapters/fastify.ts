/**
 * Fastify plugin. Maps a request to a delivery and an outcome to a response; nothing else.
 *
 * ```ts
 * import Fastify from 'fastify';
 * import { inbox } from 'webhook-inbox/fastify';
 *
 * const app = Fastify();
 * await app.register(inbox, { prefix: '/webhooks', db: process.env.DATABASE_URL, handle: applyEvent });
 * // GET /webhooks/health answers inbox.health().
 * ```
 *
 * Two layers, on purpose. The outer plugin is wrapped with fastify-plugin (name, `fastify: '5.x'`)
 * so that `app.webhookInbox` and the `onClose` hook reach the app that registered it. The
 * route lives in an inner, encapsulated plugin: its catch-all content-type parser (which
 * leaves the bytes unread for the inbox) must not replace the app's JSON parser, and a
 * fastify-plugin'ed plugin would ignore `prefix`, so the inner one gets it.
 */
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { createInbox, Inbox } from '../src/inbox.js';
import type { InboxOptions } from '../src/options.js';
import type { Outcome } from '../src/outcome.js';
import type { BodyStream } from '../src/raw-body.js';

/** Inbox options, or `{ inbox }` to serve an inbox made by `createInbox` (not closed by Fastify). */
export type FastifyInboxOptions = InboxOptions | { inbox: Inbox };

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
  const { prefix, ...rest } = options as FastifyInboxOptions & { prefix?: string };
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
      scope.post('/', async (request: FastifyRequest, reply: FastifyReply) => {
        try {
          // No body at all (Content-Length: 0, no type): Fastify runs no parser.
          const stream = request.body as BodyStream | undefined;
          const outcome = stream
            ? await core.receiveStream(request.headers, stream)
            : await core.receive({ headers: request.headers, rawBody: EMPTY });
          return send(reply, outcome);
        } catch (err) {
          return send(reply, core.outcomeForError(err));
        }
      });
    },
    { prefix },
  );
};

/** The Fastify plugin: `app.register(inbox, { prefix: '/webhooks', db, handle })`. */
export const inbox = fp(plugin, { name: 'webhook-inbox', fastify: '5.x' });
export default inbox;

export { createInbox, Inbox };
