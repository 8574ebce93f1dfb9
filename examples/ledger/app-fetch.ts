import type { Server } from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import { handler } from '../../adapters/fetch.js';
import type { Inbox } from '../../src/index.js';
import type { LedgerAppOptions } from './app-express.js';
import { checkAccountKey, ledgerProblem, notFound, type Problem, problemForError } from './http-problems.js';
import { reconcile } from './ingest.js';
import { type Ledger, parseFailNext } from './ledger.js';

function problemResponse(p: Problem): Response {
  return new Response(JSON.stringify(p.body), {
    status: p.status,
    headers: p.headers as Record<string, string>,
  });
}

/**
 * The ledger as one plain fetch function, `Request` → `Response`, with no framework: what a
 * Next.js route handler, Bun.serve or Deno.serve runs. The inbox's handler takes /webhooks
 * (and /webhooks/health); the rest is routed by hand.
 */
export function fetchApp(
  inbox: Inbox,
  ledger: Ledger,
  options: LedgerAppOptions = {},
): (request: Request) => Promise<Response> {
  const webhooks = handler(inbox, { path: '/webhooks' });
  const ingest = options.ingest;
  const ingestWebhooks = ingest && handler(ingest, { path: '/webhooks/ingest' });
  return async (request) => {
    try {
      const { pathname } = new URL(request.url);
      if (ingest && ingestWebhooks) {
        if (pathname === '/webhooks/ingest' || pathname.startsWith('/webhooks/ingest/'))
          return await ingestWebhooks(request);
        if (pathname === '/ledger/verify' && request.method === 'GET')
          return Response.json(await reconcile(ingest, ledger));
      }
      if (pathname === '/webhooks' || pathname.startsWith('/webhooks/')) return await webhooks(request);
      const account = /^\/accounts\/([^/]+)$/.exec(pathname);
      if (account && request.method === 'GET') {
        const key = decodeURIComponent(account[1]);
        const bad = checkAccountKey(key);
        if (bad) return problemResponse(bad);
        return Response.json(await ledger.account(await inbox.kysely(), key));
      }
      if (pathname === '/fail-next' && request.method === 'POST' && options.testHooks) {
        const failNext = parseFailNext(await request.json().catch(() => undefined));
        if (!failNext) {
          return problemResponse(
            ledgerProblem(400, 'body must be {"key": string, "times"?: integer}', { field: 'body' }),
          );
        }
        ledger.failNext.set(failNext.key, failNext.times);
        return Response.json(failNext);
      }
      if (pathname === '/health' && request.method === 'GET') return Response.json({ ok: true });
      return problemResponse(notFound());
    } catch (err) {
      return problemResponse(problemForError(err));
    }
  };
}

export async function fetchServer(
  inbox: Inbox,
  ledger: Ledger,
  options: LedgerAppOptions = {},
): Promise<Server> {
  const app = fetchApp(inbox, ledger, options);
  return createAdaptorServer({ fetch: (request: Request) => app(request) }) as Server;
}
