/**
 * A minimal fault-injecting HTTP proxy for the chaos suite (until the project's own
 * `src/testing/fault-proxy.ts` is used): in front of several upstream instances, it answers
 * 500 without forwarding, loses the ack (forwards, then drops the connection before the
 * answer), delivers a request twice, and delays requests so that they overtake each other.
 * It counts every fault it injected and every outcome the instances answered.
 */
import { Agent, createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FaultRates {
  /** Answer 500 without forwarding. */
  error500: number;
  /** Forward, then destroy the client connection instead of answering. */
  lostAck: number;
  /** Forward a second copy of the request a little later (its answer is discarded). */
  duplicate: number;
  /** Hold the request 0–`delayMaxMs` before forwarding (reordering). */
  delay: number;
  delayMaxMs: number;
}

export interface FaultProxy {
  readonly port: number;
  /** Faults injected, by kind. */
  readonly faults: Record<string, number>;
  /** Outcomes the instances answered (the body's `status`, or the HTTP status), by kind. */
  readonly outcomes: Record<string, number>;
  /** Ids that were answered `held` at least once. */
  readonly heldIds: Set<string>;
  close(): Promise<void>;
}

function bump(counts: Record<string, number>, kind: string, by = 1) {
  counts[kind] = (counts[kind] ?? 0) + by;
}

export async function startFaultProxy(options: {
  /** Ports of the instances alive right now. */
  upstreams: () => number[];
  rates: FaultRates;
}): Promise<FaultProxy> {
  const faults: Record<string, number> = {};
  const outcomes: Record<string, number> = {};
  const heldIds = new Set<string>();
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  const { rates } = options;

  function forward(
    req: IncomingMessage,
    body: Buffer,
  ): Promise<{ status: number; headers: Record<string, string>; body: Buffer }> {
    const ports = options.upstreams();
    if (ports.length === 0)
      return Promise.resolve({ status: 502, headers: {}, body: Buffer.from('no upstream') });
    const port = ports[Math.floor(Math.random() * ports.length)];
    return new Promise((resolve) => {
      const up = httpRequest(
        {
          host: '127.0.0.1',
          port,
          method: req.method,
          path: req.url,
          headers: req.headers,
          agent,
          timeout: 15_000,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c) => chunks.push(c));
          res.on('end', () => {
            const payload = Buffer.concat(chunks);
            let kind = String(res.statusCode);
            try {
              const parsed = JSON.parse(payload.toString());
              if (typeof parsed.status === 'string') kind = parsed.status;
            } catch {}
            bump(outcomes, kind);
            if (kind === 'held') heldIds.add(String(req.headers['idempotency-key']));
            const headers: Record<string, string> = {};
            for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') headers[k] = v;
            resolve({ status: res.statusCode ?? 502, headers, body: payload });
          });
          res.on('error', () => resolve({ status: 502, headers: {}, body: Buffer.from('upstream reset') }));
        },
      );
      up.on('timeout', () => up.destroy(new Error('timeout')));
      up.on('error', () => {
        // Instance killed (or restarting): the sender sees a 502 and retries.
        bump(outcomes, 'upstream-down');
        resolve({ status: 502, headers: {}, body: Buffer.from('upstream down') });
      });
      up.end(body);
    });
  }

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks);
      if (Math.random() < rates.error500) {
        bump(faults, '500');
        res.writeHead(500, { 'content-type': 'text/plain' }).end('injected 500');
        return;
      }
      if (Math.random() < rates.delay) {
        bump(faults, 'delay');
        await new Promise((r) => setTimeout(r, Math.random() * rates.delayMaxMs));
      }
      if (Math.random() < rates.duplicate) {
        bump(faults, 'duplicate');
        setTimeout(() => void forward(req, body), Math.random() * 200);
      }
      const lose = Math.random() < rates.lostAck;
      const answer = await forward(req, body);
      if (lose) {
        bump(faults, 'lost-ack');
        res.destroy();
        return;
      }
      res.writeHead(answer.status, answer.headers).end(answer.body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    faults,
    outcomes,
    heldIds,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      agent.destroy();
    },
  };
}
