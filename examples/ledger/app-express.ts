import { createServer, type Server } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import { inbox as inboxMiddleware } from '../../adapters/express.js';
import { expressConsole } from '../../src/console/index.js';
import type { Inbox } from '../../src/index.js';
import { checkAccountKey, ledgerProblem, notFound, type Problem, problemForError } from './http-problems.js';
import { reconcile } from './ingest.js';
import { type Ledger, metricsRegistry, parseFailNext } from './ledger.js';

export interface LedgerAppOptions {
  /** Serve POST /fail-next (a test hook). @defaultValue false */
  testHooks?: boolean;
  /** Serve the operator console at /console, behind this token (Bearer, or the login form). */
  consoleToken?: string;
  /** The ingest contract's inbox: serve POST /webhooks/ingest and GET /ledger/verify (ingest.ts). */
  ingest?: Inbox;
}

function sendProblem(res: Response, p: Problem): void {
  res.status(p.status).set(p.headers).send(JSON.stringify(p.body));
}

/**
 * The ledger over Express: POST /webhooks behind the inbox (and GET /webhooks/health),
 * GET /accounts/:key, GET /health, GET /metrics when the inbox has a metrics registry, and
 * POST /fail-next with `testHooks`, the operator console at /console with `consoleToken`,
 * POST /webhooks/ingest and GET /ledger/verify with `ingest`. Every error, on every route, is problem+json.
 * `framework` is the `express` module to build it with (Express 4 in app-express4.ts).
 */
export function expressApp(
  inbox: Inbox,
  ledger: Ledger,
  options: LedgerAppOptions = {},
  framework: typeof express = express,
) {
  const app = framework();
  const ingest = options.ingest;
  if (ingest) {
    app.use('/webhooks/ingest', inboxMiddleware(ingest));
    app.get('/ledger/verify', async (_req, res, next) => {
      try {
        res.json(await reconcile(ingest, ledger));
      } catch (err) {
        next(err);
      }
    });
  }
  app.use('/webhooks', inboxMiddleware(inbox));
  if (options.consoleToken) app.use('/console', expressConsole({ inbox, token: options.consoleToken }));
  app.get('/accounts/:key', async (req, res, next) => {
    const bad = checkAccountKey(req.params.key);
    if (bad) return sendProblem(res, bad);
    try {
      res.json(await ledger.account(await inbox.kysely(), req.params.key));
    } catch (err) {
      next(err);
    }
  });
  if (options.testHooks) {
    app.post('/fail-next', framework.json(), (req, res) => {
      const failNext = parseFailNext(req.body);
      if (!failNext) {
        sendProblem(
          res,
          ledgerProblem(400, 'body must be {"key": string, "times"?: integer}', { field: 'body' }),
        );
        return;
      }
      ledger.failNext.set(failNext.key, failNext.times);
      res.json(failNext);
    });
  }
  app.get('/health', (_req, res) => {
    res.json({ ok: true });
  });
  // The registry given as the inbox's `metrics` option, in Prometheus text format.
  const registry = metricsRegistry(inbox);
  if (registry) {
    app.get('/metrics', async (_req, res, next) => {
      try {
        res.type(registry.contentType).send(await registry.metrics());
      } catch (err) {
        next(err);
      }
    });
  }
  app.use((_req: Request, res: Response) => sendProblem(res, notFound()));
  // Express's default handler writes HTML with the stack; this one writes problem+json.
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) =>
    sendProblem(res, problemForError(err)),
  );
  return app;
}

export async function expressServer(
  inbox: Inbox,
  ledger: Ledger,
  options: LedgerAppOptions = {},
): Promise<Server> {
  return createServer(expressApp(inbox, ledger, options));
}
