import express from 'express';
import { inbox as inboxMiddleware } from '../../adapters/express.js';
import type { Inbox } from '../../src/index.js';
import type { Ledger } from './ledger.js';

/** The ledger over Express: POST /webhooks behind the inbox, GET /accounts/:key, GET /health. */
export function expressApp(inbox: Inbox, ledger: Ledger) {
  const app = express();
  app.use('/webhooks', inboxMiddleware(inbox));
  app.get('/accounts/:key', async (req, res) => {
    res.json(await ledger.account(await inbox.kysely(), req.params.key));
  });
  app.post('/fail-next', express.json(), (req, res) => {
    const { key, times } = req.body ?? {};
    if (typeof key !== 'string' || (times !== undefined && !Number.isInteger(times))) {
      res.status(400).json({ error: 'body must be {"key": string, "times"?: integer}' });
      return;
    }
    ledger.failNext.set(key, times ?? 1);
    res.json({ key, times: times ?? 1 });
  });
  app.get('/health', (_req, res) => {
    res.json({ ok: true });
  });
  return app;
}
