import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createInbox, type Inbox, type InboxOptions } from '../../src/index.js';
import { expressApp } from './app-express.js';
import { Ledger } from './ledger.js';

export type Framework = 'express';
export const FRAMEWORKS: readonly Framework[] = ['express'];

export interface LedgerServerOptions {
  framework?: Framework;
  port?: number;
  host?: string;
  /** Schema of the ledger's own tables. @defaultValue 'ledger' */
  ledgerSchema?: string;
  /** Inbox options; `handle` is the ledger's. */
  inbox?: Omit<InboxOptions, 'handle'>;
}

export interface LedgerServer {
  readonly url: string;
  readonly inbox: Inbox;
  readonly ledger: Ledger;
  readonly server: Server;
  close(): Promise<void>;
}

/** Starts the ledger example: the inbox, its tables, the ledger's tables, and an HTTP server. */
export async function startLedger(options: LedgerServerOptions = {}): Promise<LedgerServer> {
  const ledger = new Ledger(options.ledgerSchema);
  const inbox = createInbox({ ...options.inbox, handle: ledger.handle });
  await ledger.setup(await inbox.kysely());
  const framework = options.framework ?? 'express';
  if (!FRAMEWORKS.includes(framework)) throw new Error(`FRAMEWORK must be one of ${FRAMEWORKS.join(', ')}`);
  const server = createServer(expressApp(inbox, ledger));
  await new Promise<void>((resolve) =>
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', resolve),
  );
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${options.host ?? '127.0.0.1'}:${port}`,
    inbox,
    ledger,
    server,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await inbox.close();
    },
  };
}
