import { createServer, type Server } from 'node:http';
import Fastify from 'fastify';
import { inbox as inboxPlugin } from '../../adapters/fastify.js';
import type { Inbox } from '../../src/index.js';
import { type Ledger, metricsRegistry, parseFailNext } from './ledger.js';

/** The ledger over Fastify: the same routes as the Express app, the inbox as a plugin. */
export async function fastifyServer(inbox: Inbox, ledger: Ledger): Promise<Server> {
  let server: Server | undefined;
  const app = Fastify({
    serverFactory: (handler) => {
      server = createServer(handler);
      return server;
    },
  });
  await app.register(inboxPlugin, { prefix: '/webhooks', inbox });
  app.get<{ Params: { key: string } }>('/accounts/:key', async (request) =>
    ledger.account(await inbox.kysely(), request.params.key),
  );
  // Fastify's own JSON parser still serves this route: the inbox's raw-body parser is
  // scoped to the plugin.
  app.post('/fail-next', async (request, reply) => {
    const failNext = parseFailNext(request.body);
    if (!failNext) return reply.code(400).send({ error: 'body must be {"key": string, "times"?: integer}' });
    ledger.failNext.set(failNext.key, failNext.times);
    return failNext;
  });
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
