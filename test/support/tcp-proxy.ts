import type { AddressInfo } from 'node:net';
import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of a real server (Redis, Postgres), to take that server away from one
 * client, or make it slow, without touching the shared server other tests use. Nothing is
 * mocked: every byte still goes to and comes from the real server.
 */
export interface TcpProxy {
  readonly port: number;
  /** Delays every reply from the server by this long (0: none). */
  setDelay(ms: number): void;
  /**
   * The connection over which the client next sends `text` (a statement's text, as the
   * query message carries it) is cut before the server sees it: that one
   * statement fails as on a dropped connection, and every other connection goes on. Once.
   */
  cutWhenSent(text: string): void;
  /**
   * The next bytes a client sends are not forwarded: its connection is reset (a TCP RST), as
   * when a server or a middlebox drops a connection under a query. The client's read fails
   * with ECONNRESET.
   */
  resetNext(): void;
  /** The server "goes away": open connections are cut and new ones refused. */
  stop(): Promise<void>;
  /** The server is back, on the same port. */
  start(): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  let delayMs = 0;
  let cutOn: Buffer | undefined;
  let resetNext = false;
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = 0;

  const listen = async () => {
    const s = createServer((client) => {
      const upstream = connect(targetPort, targetHost);
      sockets.add(client);
      sockets.add(upstream);
      let chain = Promise.resolve();
      client.on('data', (chunk: Buffer) => {
        if (cutOn && chunk.includes(cutOn)) {
          cutOn = undefined;
          client.destroy();
          upstream.destroy();
          return;
        }
        if (resetNext) {
          resetNext = false;
          client.resetAndDestroy();
          upstream.destroy();
          return;
        }
        upstream.write(chunk);
      });
      upstream.on('data', (chunk) => {
        if (delayMs === 0) {
          chain = chain.then(() => {
            if (!client.destroyed) client.write(chunk);
          });
          return;
        }
        const wait = delayMs;
        // Replies keep their order; each is held back by the current delay.
        chain = chain
          .then(() => new Promise<void>((resolve) => setTimeout(resolve, wait).unref()))
          .then(() => {
            if (!client.destroyed) client.write(chunk);
          });
      });
      const end = () => {
        client.destroy();
        upstream.destroy();
        sockets.delete(client);
        sockets.delete(upstream);
      };
      client.on('close', end).on('error', end);
      upstream.on('close', end).on('error', end);
    });
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => resolve());
    });
    port = (s.address() as AddressInfo).port;
    server = s;
  };

  const stop = async () => {
    const s = server;
    server = undefined;
    for (const socket of sockets) socket.destroy();
    sockets.clear();
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  };

  await listen();
  return {
    get port() {
      return port;
    },
    setDelay(ms) {
      delayMs = ms;
    },
    cutWhenSent(text) {
      cutOn = Buffer.from(text);
    },
    resetNext() {
      resetNext = true;
    },
    stop,
    start: listen,
    close: stop,
  };
}
