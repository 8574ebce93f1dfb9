import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request as the consumer saw it. */
export interface Arrival {
  readonly n: number;
  /** The request's path and query (redirected attempts arrive elsewhere). */
  readonly url: string;
  readonly method: string;
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
  readonly at: number;
}

export type Reply =
  | { status: number; headers?: Record<string, string>; body?: string }
  | 'reset'
  | Promise<{ status: number; headers?: Record<string, string>; body?: string } | 'reset'>;

/**
 * A consumer for sender tests: records every request that arrives (in arrival order) and
 * answers what `respond` says. It also records, per key, how many different seqs were in flight
 * at once, so head-of-line can be asserted on the wire.
 */
export async function recordingServer(respond: (arrival: Arrival) => Reply = () => ({ status: 200 })) {
  const arrivals: Arrival[] = [];
  /** Per key, the seqs with a request open at the server, and how many. */
  const inFlight = new Map<string, Map<number | null, number>>();
  let maxInFlightPerKey = 0;
  let listeners: Array<() => void> = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const key = (req.headers['x-key'] as string | undefined) ?? null;
      const seq = req.headers['x-seq'] === undefined ? null : Number(req.headers['x-seq']);
      const arrival: Arrival = {
        n: arrivals.length + 1,
        url: req.url ?? '',
        method: req.method ?? '',
        id: String(req.headers['idempotency-key']),
        key,
        seq,
        headers: req.headers,
        body: Buffer.concat(chunks),
        at: Date.now(),
      };
      arrivals.push(arrival);
      const notify = listeners;
      listeners = [];
      for (const l of notify) l();
      if (key !== null) {
        // Counted in distinct seqs: an attempt the sender abandoned (its timeout) may still look
        // open here for a moment after the sender's retry of the same seq arrived.
        const open = inFlight.get(key) ?? new Map<number | null, number>();
        inFlight.set(key, open);
        open.set(seq, (open.get(seq) ?? 0) + 1);
        maxInFlightPerKey = Math.max(maxInFlightPerKey, open.size);
        // Over when the exchange is over for the sender too (answered, reset, or abandoned).
        res.once('close', () => {
          const left = (open.get(seq) ?? 1) - 1;
          if (left === 0) open.delete(seq);
          else open.set(seq, left);
        });
      }
      {
        const reply = await respond(arrival);
        if (reply === 'reset') {
          req.socket.resetAndDestroy();
          return;
        }
        res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
        res.end(reply.body ?? JSON.stringify({ status: reply.status < 300 ? 'processed' : 'failed' }));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/webhooks`,
    arrivals,
    get maxInFlightPerKey() {
      return maxInFlightPerKey;
    },
    /** Resolves once `count` requests have arrived. */
    async arrived(count: number): Promise<void> {
      while (arrivals.length < count) await new Promise<void>((resolve) => listeners.push(resolve));
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
