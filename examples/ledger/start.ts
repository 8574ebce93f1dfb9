import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Provider, providers } from '../../src/delivery/providers.js';
import {
  createInbox,
  type Handler,
  type Inbox,
  type InboxOptions,
  standardWebhooks,
  type Verify,
} from '../../src/index.js';
import { testHooksFromEnv } from './http-problems.js';
import { ingestInboxOptions } from './ingest.js';
import { Ledger } from './ledger.js';

export type Framework = 'express' | 'express4' | 'koa' | 'fastify' | 'hono' | 'fetch';

/** One HTTP server per framework, each serving the same ledger contract. Loaded on demand. */
type ServerFactory = (
  inbox: Inbox,
  ledger: Ledger,
  options: { testHooks?: boolean; consoleToken?: string; ingest?: Inbox },
) => Promise<Server>;
const SERVERS: Record<Framework, () => Promise<ServerFactory>> = {
  express: async () => (await import('./app-express.js')).expressServer,
  express4: async () => (await import('./app-express4.js')).express4Server,
  koa: async () => (await import('./app-koa.js')).koaServer,
  fastify: async () => (await import('./app-fastify.js')).fastifyServer,
  hono: async () => (await import('./app-hono.js')).honoServer,
  fetch: async () => (await import('./app-fetch.js')).fetchServer,
};
/** Every framework the ledger runs on (the conformance table runs on each). */
export const ALL_FRAMEWORKS = Object.keys(SERVERS) as readonly Framework[];
/**
 * The frameworks with an operator console adapter and Node's own request (the tests of the
 * console, hostile senders and metrics run on these).
 */
export const FRAMEWORKS = ['express', 'koa', 'fastify'] as const satisfies readonly Framework[];

/**
 * Standard Webhooks verification when WEBHOOK_SECRET (`whsec_…`) is set and PROVIDER is not;
 * off otherwise.
 */
export function verifyFromEnv(env: Record<string, string | undefined> = process.env): Verify | undefined {
  const secret = env.WEBHOOK_SECRET;
  return secret && !env.PROVIDER ? standardWebhooks({ secret }) : undefined;
}

/**
 * A provider preset when PROVIDER names one (`stripe`, `github`, `shopify`, `svix`,
 * `standardWebhooks`, `slack`, `paddle`, `gitlab`), with WEBHOOK_SECRET as its secret.
 */
export function providerFromEnv(env: Record<string, string | undefined> = process.env): Provider | undefined {
  const name = env.PROVIDER;
  if (!name) return undefined;
  if (!Object.hasOwn(providers, name)) {
    throw new Error(
      `PROVIDER must be one of ${Object.keys(providers).join(', ')}; got ${JSON.stringify(name)}`,
    );
  }
  const secret = env.WEBHOOK_SECRET;
  if (!secret) throw new Error(`PROVIDER=${name} needs WEBHOOK_SECRET (the provider's signing secret)`);
  return providers[name as keyof typeof providers]({ secret });
}

export interface LedgerServerOptions {
  framework?: Framework;
  port?: number;
  host?: string;
  /** Schema of the ledger's own tables. @defaultValue 'ledger' */
  ledgerSchema?: string;
  /** Inbox options; `handle` is the ledger's. */
  inbox?: Omit<InboxOptions, 'handle'>;
  /** Wraps the ledger's handler (tests use it to hold a delivery in flight). */
  wrapHandler?: (handle: Handler) => Handler;
  /** Every handler run first waits this long (a slow handler). @defaultValue 0 */
  handlerDelayMs?: number;
  /** Serve POST /fail-next, a test hook anyone could call. @defaultValue LEDGER_TEST_HOOKS=1 */
  testHooks?: boolean;
  /** Serve the operator console at /console behind this token. @defaultValue CONSOLE_TOKEN */
  consoleToken?: string;
  /**
   * The ingest contract's inbox (`POST /webhooks/ingest`, `GET /ledger/verify`, ingest.ts):
   * options over its defaults, or `false` to leave it out. It shares the ledger inbox's
   * database (the same connection string, else its Kysely instance), `schema`, `tablePrefix`,
   * `gapTimeoutMs`, `sweepIntervalMs` and `logger` unless given here.
   * @defaultValue served
   */
  ingest?: Omit<InboxOptions, 'handle'> | false;
}

export interface LedgerServer {
  readonly url: string;
  readonly inbox: Inbox;
  readonly ledger: Ledger;
  /** The ingest contract's inbox, unless `ingest: false`. */
  readonly ingest?: Inbox;
  readonly server: Server;
  /** Stops at once: open connections are cut (tests). */
  close(): Promise<void>;
  /**
   * Stops gracefully (SIGTERM): no new connection, requests in flight are answered (with
   * `Connection: close`), then `inbox.close()` and the last idle connections.
   */
  shutdown(): Promise<void>;
}

/** Starts the ledger example: the inbox, its tables, the ledger's tables, and an HTTP server. */
export async function startLedger(options: LedgerServerOptions = {}): Promise<LedgerServer> {
  const framework = options.framework ?? 'express';
  if (!ALL_FRAMEWORKS.includes(framework))
    throw new Error(`FRAMEWORK must be one of ${ALL_FRAMEWORKS.join(', ')}`);
  const ledger = new Ledger(options.ledgerSchema);
  ledger.delayMs = options.handlerDelayMs ?? 0;
  const handle: Handler = options.wrapHandler ? options.wrapHandler(ledger.handle) : ledger.handle;
  const inbox = createInbox({ ...options.inbox, handle });
  let ingest: Inbox | undefined;
  try {
    await ledger.setup(await inbox.kysely());
    if (options.ingest !== false) {
      const { db, schema, tablePrefix, gapTimeoutMs, sweepIntervalMs, logger } = options.inbox ?? {};
      ingest = createInbox(
        ingestInboxOptions(ledger, {
          // Its own pool from a connection string; otherwise the ledger inbox's Kysely instance
          // (one embedded PGlite database is one session: two drivers on it would interleave).
          db: typeof db === 'string' ? db : await inbox.kysely(),
          schema,
          tablePrefix,
          gapTimeoutMs,
          sweepIntervalMs,
          logger,
          ...options.ingest,
        }),
      );
      // On the ledger inbox's database the ledger's tables exist already; another needs them now.
      if (options.ingest?.db !== undefined) await ledger.setup(await ingest.kysely());
    }
    const testHooks = options.testHooks ?? testHooksFromEnv();
    const server = await (await SERVERS[framework]())(inbox, ledger, {
      testHooks,
      consoleToken: options.consoleToken ?? (process.env.CONSOLE_TOKEN || undefined),
      ingest,
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, options.host ?? '127.0.0.1', resolve);
    });
    const { port } = server.address() as AddressInfo;
    // Once stopping, each response closes its connection, so that a keep-alive sender cannot
    // slip another request in (graceful shutdown).
    let stopping = false;
    server.on('request', (_req, res) => {
      if (stopping) res.shouldKeepAlive = false;
    });
    return {
      url: `http://${options.host ?? '127.0.0.1'}:${port}`,
      inbox,
      ledger,
      ingest,
      server,
      async close() {
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
        await ingest?.close();
        await inbox.close();
      },
      async shutdown() {
        stopping = true;
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        // No new connection from here on. Each response now closes its connection; one that
        // carries no request (idle keep-alive, or accepted and still silent) is closed here, now
        // and as it goes idle, until the last one has ended: then every request taken has its
        // answer, and none can arrive once the inbox is closing.
        server.closeIdleConnections();
        const sweep = setInterval(() => server.closeIdleConnections(), 100);
        await closed;
        clearInterval(sweep);
        // The inboxes stop the workers and the sweeper, and close their pools (the ingest inbox
        // first: it may run on the ledger inbox's Kysely instance).
        await ingest?.close();
        await inbox.close();
      },
    };
  } catch (err) {
    await ingest?.close();
    await inbox.close();
    throw err;
  }
}
