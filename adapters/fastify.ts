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
import { checkPath, DEFAULT_ROOT_PATH } from '../src/delivery/mount-path.js';
import { InboxOptionsError } from '../src/errors.js';
import { createInbox, Inbox } from '../src/inbox/inbox.js';
import type { InboxOptions } from '../src/options/options.js';
import { methodNotAllowed, type Outcome, responseText } from '../src/outcome.js';
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
  /**
   * The name under which the inbox is decorated on the app (`app[decorator]`). Give each inbox
   * its own when registering several; a name already taken is refused.
   * @defaultValue `'webhookInbox'` (taken by the first inbox registered; later ones without a
   * `decorator` are not decorated)
   */
  decorator?: string;
}

/**
 * Inbox options, or `{ inbox }` to serve an inbox made by `createInbox` (not closed by
 * Fastify); with the mount options either way.
 */
export type FastifyInboxOptions<TBody = any, DB = any> = (InboxOptions<TBody, DB> | { inbox: Inbox }) &
  FastifyMountOptions;

/** Methods other than POST that get 405 on the webhook path (HEAD follows GET in Fastify). */
const OTHER_METHODS = ['GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'] as const;

declare module 'fastify' {
  interface FastifyInstance {
    /** The inbox registered by `webhook-inbox/fastify` (the first one, if several are). */
    webhookInbox: Inbox;
  }
}

const EMPTY = Buffer.alloc(0);

/**
 * Route schemas, for `@fastify/swagger` and other tools that read them. Documentation only: no
 * body, header or response validation (the core checks every header and the body itself, and
 * answers problem+json; Fastify's validation would answer first, in its own format).
 */
const TAGS = ['webhooks'];
const PROBLEM = { description: 'problem+json (RFC 9457)', type: 'object', additionalProperties: true };
const DELIVERY_SCHEMA = {
  summary: 'Receive a webhook delivery',
  description:
    'Claims the event and runs the handler once (Idempotency-Key, X-Key/X-Seq for ordered events). Duplicates get 200 with the stored result and Idempotent-Replayed: true.',
  tags: TAGS,
  response: {
    200: { description: 'processed, duplicate or dead-lettered', type: 'object', additionalProperties: true },
    202: {
      description: 'held (waiting for an earlier seq) or pending (deferred mode)',
      type: 'object',
      additionalProperties: true,
    },
    '4xx': PROBLEM,
    '5xx': PROBLEM,
  },
};
const HEALTH_SCHEMA = {
  summary: 'Inbox health',
  description: '200 when the database answers, 503 otherwise.',
  tags: TAGS,
  response: { 200: { type: 'object', additionalProperties: true }, 503: PROBLEM },
};
const NOT_ALLOWED_SCHEMA = { hide: true, tags: TAGS, response: { 405: PROBLEM } };

function send(reply: FastifyReply, outcome: Outcome): FastifyReply {
  return reply.code(outcome.status).headers(outcome.headers).send(responseText(outcome));
}

const plugin: FastifyPluginAsync<FastifyInboxOptions> = async (app, options) => {
  // Fastify hands the plugin its own register options too (`prefix`, `logLevel`,
  // `logSerializers`): they are the framework's, not unknown inbox options.
  const {
    prefix: givenPrefix,
    path,
    decorator,
    logLevel: _logLevel,
    logSerializers: _logSerializers,
    ...rest
  } = options as FastifyInboxOptions & { logLevel?: unknown; logSerializers?: unknown };
  if (givenPrefix !== undefined && path !== undefined && givenPrefix !== path) {
    throw new InboxOptionsError('path', 'is the same option as `prefix`: give one of them');
  }
  const prefix = checkPath(givenPrefix ?? path, givenPrefix !== undefined ? 'prefix' : 'path');
  if (decorator !== undefined && (typeof decorator !== 'string' || !/^[A-Za-z_$][\w$]*$/.test(decorator))) {
    throw new InboxOptionsError(
      'decorator',
      `must be a property name, e.g. 'billingInbox'; got ${JSON.stringify(decorator)}`,
    );
  }
  if (decorator !== undefined && app.hasDecorator(decorator)) {
    throw new InboxOptionsError(
      'decorator',
      `"${decorator}" is already decorated on this app: give each inbox its own name`,
    );
  }
  // The app's logger by default, so the inbox's lines carry Fastify's request-independent
  // bindings and go where the app's go.
  const core =
    'inbox' in rest && rest.inbox instanceof Inbox
      ? rest.inbox
      : createInbox({ logger: app.log, ...(rest as InboxOptions) });
  if (decorator !== undefined) app.decorate(decorator, core);
  else if (!app.hasDecorator('webhookInbox')) app.decorate('webhookInbox', core);
  // Close only what this plugin created: an inbox passed in may be shared with a worker or CLI.
  if (core !== (rest as { inbox?: Inbox }).inbox) app.addHook('onClose', () => core.close());
  // The inbox starts at construction; Fastify's start waits for it, so that a wrong database
  // fails `app.listen()` / `app.ready()` loudly instead of answering the provider 503.
  app.addHook('onReady', async () => {
    await core.ready();
  });

  await app.register(
    async (scope: FastifyInstance) => {
      // Scoped to this encapsulated context: the app's own parsers are untouched. The body
      // stays a stream, read by the core with the same `maxBodyBytes` bound (and the same
      // 413 problem+json) as on Express and Koa; Fastify's `bodyLimit` only applies to the
      // parsers that buffer for it, so it plays no part here.
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload));
      scope.get('/health', { schema: HEALTH_SCHEMA }, async (_request: FastifyRequest, reply: FastifyReply) =>
        send(reply, await core.healthOutcome().catch((err) => core.outcomeForError(err))),
      );
      scope.route({
        method: [...OTHER_METHODS],
        url: '/',
        schema: NOT_ALLOWED_SCHEMA,
        handler: async (_request: FastifyRequest, reply: FastifyReply) => send(reply, methodNotAllowed()),
      });
      scope.post('/', { schema: DELIVERY_SCHEMA }, async (request: FastifyRequest, reply: FastifyReply) => {
        try {
          // No body at all (Content-Length: 0, no type): Fastify runs no parser.
          const stream = request.body as BodyStream | undefined;
          // Header lists unjoined (`headersDistinct` of the Node request): a repeated id, key or
          // seq header is refused by the core instead of being read as one joined value.
          // `app.inject()`'s request (light-my-request) has no headersDistinct: its headers then.
          const headers = request.raw.headersDistinct ?? request.headers;
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
