import { createServer, type Server } from 'node:http';
import { bodyParser } from '@koa/bodyparser';
import Router from '@koa/router';
import Koa from 'koa';
import { inbox as inboxMiddleware } from '../../adapters/koa.js';
import type { Inbox } from '../../src/index.js';
import { type Ledger, metricsRegistry, parseFailNext } from './ledger.js';

/** The ledger over Koa: the same routes as the Express app, the inbox as route middleware. */
export function koaApp(inbox: Inbox, ledger: Ledger): Koa {
  const app = new Koa();
  const router = new Router();
  const webhooks = inboxMiddleware(inbox);
  router.post('/webhooks', webhooks);
  router.get('/webhooks/health', webhooks);
  router.get('/accounts/:key', async (ctx) => {
    ctx.body = await ledger.account(await inbox.kysely(), ctx.params.key);
  });
  // The body parser only on this route: the inbox needs the webhook's bytes unread.
  router.post('/fail-next', bodyParser(), (ctx) => {
    const failNext = parseFailNext(ctx.request.body);
    if (!failNext) {
      ctx.status = 400;
      ctx.body = { error: 'body must be {"key": string, "times"?: integer}' };
      return;
    }
    ledger.failNext.set(failNext.key, failNext.times);
    ctx.body = failNext;
  });
  router.get('/health', (ctx) => {
    ctx.body = { ok: true };
  });
  const registry = metricsRegistry(inbox);
  if (registry) {
    router.get('/metrics', async (ctx) => {
      ctx.type = registry.contentType;
      ctx.body = await registry.metrics();
    });
  }
  app.use(router.routes()).use(router.allowedMethods());
  return app;
}

export async function koaServer(inbox: Inbox, ledger: Ledger): Promise<Server> {
  return createServer(koaApp(inbox, ledger).callback());
}
