import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { InboxOptionsError } from '../errors.js';
import { createConsole } from './console.js';
import { nodeConsole } from './mount.js';
import { type ConsoleOptions, isLoopback } from './options.js';

export interface ServeConsoleOptions extends ConsoleOptions {
  /** @defaultValue 8080 (0 picks a free port) */
  port?: number;
  /** @defaultValue '127.0.0.1' */
  host?: string;
}

export interface ServedConsole {
  readonly url: string;
  readonly server: Server;
  close(): Promise<void>;
}

/** Serves the console at the root of its own server; with `insecure: true`, on a loopback address only. */
export async function serveConsole(options: ServeConsoleOptions): Promise<ServedConsole> {
  const { port = 8080, host = '127.0.0.1', ...rest } = options;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new InboxOptionsError('port', `must be an integer from 0 to 65535; got ${JSON.stringify(port)}`);
  }
  const app = createConsole(rest);
  if (app.options.insecure && !app.options.token && !app.options.authorize && !isLoopback(host)) {
    throw new InboxOptionsError(
      'host',
      `must be a loopback address with \`insecure: true\`; got ${JSON.stringify(host)}`,
    );
  }
  const listener = nodeConsole(app);
  const server = createServer((req, res) => {
    listener(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('internal error');
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const address = server.address() as AddressInfo;
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${shown}:${address.port}`,
    server,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
