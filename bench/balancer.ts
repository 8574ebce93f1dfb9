/**
 * The load balancer of the chaos suite: spreads requests over the instances alive right now (a
 * 502 when none is, and the sender retries), behind the fault proxy. It notes which events were
 * answered `held`, to count how many were drained later.
 */
import { Agent, createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Balancer {
  readonly url: string;
  /** Requests that found no instance, and the ids answered `held` at least once. */
  readonly upstreamDown: number;
  readonly heldIds: Set<string>;
  close(): Promise<void>;
}

export async function startBalancer(upstreams: () => number[]): Promise<Balancer> {
  const heldIds = new Set<string>();
  let upstreamDown = 0;
  const agent = new Agent({ keepAlive: true, maxSockets: 128 });
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const ports = upstreams();
      const fail = () => {
        upstreamDown++;
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' }).end('instance down');
      };
      if (ports.length === 0) return fail();
      const port = ports[Math.floor(Math.random() * ports.length)];
      const { method, url: path, headers } = req;
      const up = httpRequest(
        { host: '127.0.0.1', port, method, path, headers, agent, timeout: 15_000 },
        (answer) => {
          const body: Buffer[] = [];
          answer.on('data', (c) => body.push(c));
          answer.on('end', () => {
            const payload = Buffer.concat(body);
            if (answer.statusCode === 202 && payload.includes('"held"'))
              heldIds.add(String(headers['idempotency-key']));
            res.writeHead(answer.statusCode ?? 502, answer.headers).end(payload);
          });
          answer.on('error', fail);
        },
      );
      up.on('timeout', () => up.destroy(new Error('timeout')));
      up.on('error', fail);
      up.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get upstreamDown() {
      return upstreamDown;
    },
    heldIds,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      agent.destroy();
    },
  };
}
