import { createServer, type Server } from 'node:http';
// Express 4, installed under an npm alias (`express4@npm:express@^4`) beside Express 5.
import express4 from 'express4';
import type { Inbox } from '../../src/index.js';
import { expressApp, type LedgerAppOptions } from './app-express.js';
import type { Ledger } from './ledger.js';

/** The ledger's Express app, built with Express 4: the same middleware, the other major. */
export async function express4Server(
  inbox: Inbox,
  ledger: Ledger,
  options: LedgerAppOptions = {},
): Promise<Server> {
  return createServer(expressApp(inbox, ledger, options, express4));
}
