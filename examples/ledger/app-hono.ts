import type { Server } from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import { type Context, Hono } from 'hono';
import { inbox as inboxMiddleware } from '../../adapters/hono.js';
import type { Inbox } from '../../src/index.js';
import type { LedgerAppOptions } from './app-express.js';
import { checkAccountKey, ledgerProblem, notFound, type Problem, problemForError } from './http-problems.js';
import { reconcile } from './ingest.js';
import { type Ledger, metricsRegistry, parseFailNext } from './ledger.js';

function problemResponse(c: Context, p: Problem): Response {
  return c.body(JSON.stringify(p.body), p.status as 400, p.headers as Record<string, string>);
}

/**
 * The ledger over Hono: the same routes as the Express app (no console: it has no Hono
 * adapter), the inbox as middleware on /webhooks. Every error, on every route, is problem+json.
 */
export function honoApp(inbox: Inbox, ledger: Ledger, options: LedgerAppOptions = {}): Hono {
  const app = new Hono();
  const ingest = options.ingest;
  if (ingest) {
    app.use(inboxMiddleware(ingest, { path: '/webhooks/ingest' }));
    app.get('/ledger/verify', async (c) => c.json(await reconcile(ingest, ledger)));
  }
  app.use(inboxMiddleware(inbox, { path: '/webhooks' }));
  app.get('/accounts/:key', async (c) => {
    const key = c.req.param('key');
    const bad = checkAccountKey(key);
    if (bad) return problemResponse(c, bad);
    return c.json(await ledger.account(await inbox.kysely(), key));
  });
  if (options.testHooks) {
    app.post('/fail-next', async (c) => {
      const failNext = parseFailNext(await c.req.json().catch(() => undefined));
      if (!failNext) {
        return problemResponse(
          c,
          ledgerProblem(400, 'body must be {"key": string, "times"?: integer}', { field: 'body' }),
        );
      }
      ledger.failNext.set(failNext.key, failNext.times);
      return c.json(failNext);
    });
  }
  app.get('/health', (c) => c.json({ ok: true }));
  const registry = metricsRegistry(inbox);
  if (registry) {
    app.get('/metrics', async (c) =>
      c.body(await registry.metrics(), 200, { 'content-type': registry.contentType }),
    );
  }
  app.notFound((c) => problemResponse(c, notFound()));
  app.onError((err, c) => problemResponse(c, problemForError(err)));
  return app;
}

export async function honoServer(
  inbox: Inbox,
  ledger: Ledger,
  options: LedgerAppOptions = {},
): Promise<Server> {
  return createAdaptorServer({ fetch: honoApp(inbox, ledger, options).fetch }) as Server;
}
