import { createServer, type Server } from 'node:http';
import Fastify, { type FastifyReply } from 'fastify';
import { inbox as inboxPlugin } from '../../adapters/fastify.js';
import { fastifyConsole } from '../../src/console/index.js';
import type { Inbox } from '../../src/index.js';
import type { LedgerAppOptions } from './app-express.js';
import { checkAccountKey, ledgerProblem, notFound, type Problem, problemForError } from './http-problems.js';
import { reconcile } from './ingest.js';
import { type Ledger, metricsRegistry, parseFailNext } from './ledger.js';

function sendProblem(reply: FastifyReply, p: Problem): FastifyReply {
  return reply.code(p.status).headers(p.headers).send(JSON.stringify(p.body));
}

/**
 * The ledger over Fastify: the same routes as the Express app, the inbox as a plugin. Every
 * error, on every route, is problem+json.
 */
export async function fastifyServer(
  inbox: Inbox,
  ledger: Ledger,
  options: LedgerAppOptions = {},
): Promise<Server> {
  let server: Server | undefined;
  const app = Fastify({
    // Errors Fastify answers before any route (a malformed URL, say): problem+json too.
    frameworkErrors: (err, _request, reply) => sendProblem(reply, problemForError(err)),
    serverFactory: (handler) => {
      server = createServer(handler);
      return server;
    },
  });
  // Set before the routes and the plugin's context, which inherit them.
  app.setErrorHandler((err, _request, reply) => sendProblem(reply, problemForError(err)));
  app.setNotFoundHandler((_request, reply) => sendProblem(reply, notFound()));
  await app.register(inboxPlugin, { prefix: '/webhooks', inbox });
  const ingest = options.ingest;
  if (ingest) {
    await app.register(inboxPlugin, { prefix: '/webhooks/ingest', inbox: ingest, decorator: 'ingestInbox' });
    app.get('/ledger/verify', async () => reconcile(ingest, ledger));
  }
  if (options.consoleToken) {
    await app.register(fastifyConsole, {
      prefix: '/console',
      console: { inbox, token: options.consoleToken },
    });
  }
  app.get<{ Params: { key: string } }>('/accounts/:key', async (request, reply) => {
    const bad = checkAccountKey(request.params.key);
    if (bad) return sendProblem(reply, bad);
    return ledger.account(await inbox.kysely(), request.params.key);
  });
  if (options.testHooks) {
    // Fastify's own JSON parser still serves this route: the inbox's raw-body parser is
    // scoped to the plugin.
    app.post('/fail-next', async (request, reply) => {
      const failNext = parseFailNext(request.body);
      if (!failNext) {
        return sendProblem(
          reply,
          ledgerProblem(400, 'body must be {"key": string, "times"?: integer}', { field: 'body' }),
        );
      }
      ledger.failNext.set(failNext.key, failNext.times);
      return failNext;
    });
  }
  app.get('/health', async () => ({ ok: true }));
  const registry = metricsRegistry(inbox);
  if (registry) {
    app.get('/metrics', async (_request, reply) =>
      reply.type(registry.contentType).send(await registry.metrics()),
    );
  }
  await app.ready();
  return server!;
}
