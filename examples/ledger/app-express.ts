import { createServer, type Server } from 'node:http';
import express from 'express';
import { inbox as inboxMiddleware } from '../../adapters/express.js';
import type { Inbox } from '../../src/index.js';
import { type Ledger, metricsRegistry, parseFailNext } from './ledger.js';

/**
 * The ledger over Express: POST /webhooks behind the inbox (and GET /webhooks/health),
 * GET /accounts/:key, GET /health, and GET /metrics when the inbox has a metrics registry.
 */
export function expressApp(inbox: Inbox, ledger: Ledger) {
  const app = express();
  app.use('/webhooks', inboxMiddleware(inbox));
  app.get('/accounts/:key', async (req, res) => {
    res.json(await ledger.account(await inbox.kysely(), req.params.key));
  });
  app.post('/fail-next', express.json(), (req, res) => {
    const failNext = parseFailNext(req.body);
    if (!failNext) {
      res.status(400).json({ error: 'body must be {"key": string, "times"?: integer}' });
      return;
    }
    ledger.failNext.set(failNext.key, failNext.times);
    res.json(failNext);
  });
  app.get('/health', (_req, res) => {
    res.json({ ok: true });
  });
  // The registry given as the inbox's `metrics` option, in Prometheus text format.
  const registry = metricsRegistry(inbox);
  if (registry) {
    app.get('/metrics', async (_req, res) => {
      res.type(registry.contentType).send(await registry.metrics());
    });
  }
  return app;
}

export async function expressServer(inbox: Inbox, ledger: Ledger): Promise<Server> {
  return createServer(expressApp(inbox, ledger));
}
