import { createServer, type Server } from 'node:http';
import { bodyParser } from '@koa/bodyparser';
import Router from '@koa/router';
import Koa, { type Context } from 'koa';
import { inbox as inboxMiddleware } from '../../adapters/koa.js';
import { koaConsole } from '../../src/console/index.js';
import type { Inbox } from '../../src/index.js';
import type { LedgerAppOptions } from './app-express.js';
import { checkAccountKey, ledgerProblem, notFound, type Problem, problemForError } from './http-problems.js';
import { reconcile } from './ingest.js';
import { type Ledger, metricsRegistry, parseFailNext } from './ledger.js';

function sendProblem(ctx: Context, p: Problem): void {
  ctx.status = p.status;
  ctx.set(p.headers as Record<string, string>);
  ctx.body = JSON.stringify(p.body);
}

/**
 * The ledger over Koa: the same routes as the Express app, the inbox as route middleware.
 * Every error, on every route, is problem+json.
 */
export function koaApp(inbox: Inbox, ledger: Ledger, options: LedgerAppOptions = {}): Koa {
  const app = new Koa();
  const router = new Router();
  const webhooks = inboxMiddleware(inbox);
  router.post('/webhooks', webhooks);
  router.get('/webhooks/health', webhooks);
  const ingest = options.ingest;
  if (ingest) {
    const ingestWebhooks = inboxMiddleware(ingest);
    router.post('/webhooks/ingest', ingestWebhooks);
    router.get('/webhooks/ingest/health', ingestWebhooks);
    router.get('/ledger/verify', async (ctx) => {
      ctx.body = await reconcile(ingest, ledger);
    });
  }
  router.get('/accounts/:key', async (ctx) => {
    const bad = checkAccountKey(ctx.params.key);
    if (bad) return sendProblem(ctx, bad);
    ctx.body = await ledger.account(await inbox.kysely(), ctx.params.key);
  });
  if (options.testHooks) {
    // The body parser only on this route: the inbox needs the webhook's bytes unread.
    router.post('/fail-next', bodyParser(), (ctx) => {
      const failNext = parseFailNext(ctx.request.body);
      if (!failNext) {
        sendProblem(
          ctx,
          ledgerProblem(400, 'body must be {"key": string, "times"?: integer}', { field: 'body' }),
        );
        return;
      }
      ledger.failNext.set(failNext.key, failNext.times);
      ctx.body = failNext;
    });
  }
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
  // First in the chain: every error below it, and every request nothing answered, is problem+json.
  app.use(async (ctx, next) => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) sendProblem(ctx, notFound());
    } catch (err) {
      sendProblem(ctx, problemForError(err));
    }
  });
  if (options.consoleToken) app.use(koaConsole({ inbox, token: options.consoleToken }, '/console'));
  app.use(router.routes()).use(router.allowedMethods());
  return app;
}

export async function koaServer(
  inbox: Inbox,
  ledger: Ledger,
  options: LedgerAppOptions = {},
): Promise<Server> {
  const app = koaApp(inbox, ledger, options);
  // Koa logs errors it sees itself; ours are answered and logged by problemForError.
  app.silent = true;
  return createServer(app.callback());
}
