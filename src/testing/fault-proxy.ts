/** A loopback HTTP proxy injecting a webhook sender's faults at set rates, from a seeded PRNG. */
import {
  Agent,
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  request,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { seededRandom } from './random.js';

export const FaultKind = Object.freeze({
  drop: 'drop',
  dropResponse: 'drop-response',
  duplicate: 'duplicate',
  delay: 'delay',
  reorder: 'reorder',
  error: 'error',
} as const);
export type FaultKind = (typeof FaultKind)[keyof typeof FaultKind];

/** Per-request probabilities, each from 0 to 1. */
export interface FaultRates {
  /** The request never reaches the consumer: a connection reset, a 502, or nothing until the sender's timeout. */
  drop?: number;
  /** The consumer processes the request, then the response is lost: the sender retries an applied event. */
  dropResponse?: number;
  /** Forwarded twice (the copy a little later). */
  duplicate?: number;
  delay?: number;
  /** Held back until a later request has overtaken it. */
  reorder?: number;
  /** Answered 500 without reaching the consumer. */
  error?: number;
}

export type DropMode = 'reset' | '502' | 'timeout';

export interface FaultProxyOptions {
  /** The consumer's origin; paths are forwarded as they are. */
  target: string | URL;
  /** Seed of the PRNG that decides every fault. @defaultValue 1 */
  seed?: number;
  rates?: FaultRates;
  /** Longest delay (and longest a reordered request is held). @defaultValue 100 */
  maxDelayMs?: number;
  /** How a dropped request looks to the sender, chosen at random among these. @defaultValue all three */
  dropModes?: DropMode[];
  /** A `timeout` drop holds the request this long if the sender does not give up first. @defaultValue 30000 */
  holdMs?: number;
  /** @defaultValue 0 (a free port) */
  port?: number;
}

export interface FaultStats {
  requests: number;
  /** Requests sent on to the consumer (duplicates count twice). */
  forwarded: number;
  injected: Record<FaultKind, number>;
  drops: Record<DropMode, number>;
  /** The consumer's answers, by the `status` of its JSON body (`processed`, `held`, …) or `http <code>`. */
  outcomes: Record<string, number>;
  /** Answers marked `Idempotent-Replayed: true`. */
  replayed: number;
}

export interface FaultProxy {
  readonly url: string;
  stats(): FaultStats;
  /** Changes the rates from now on (for example to 0, to let a run finish cleanly). */
  setRates(rates: FaultRates): void;
  /** Resolves when no request is being forwarded or held. */
  idle(): Promise<void>;
  close(): Promise<void>;
}

const HOP_BY_HOP = new Set(
  'connection keep-alive proxy-connection transfer-encoding upgrade te trailer host content-length'.split(
    ' ',
  ),
);

function endToEnd(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const kept: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) kept[name] = value;
  }
  return kept;
}

function checkRates(rates: FaultRates = {}): Required<FaultRates> {
  for (const name of Object.keys(rates)) {
    if (!Object.hasOwn(FaultKind, name)) throw new RangeError(`fault proxy: unknown rate \`${name}\``);
  }
  const checked = {} as Required<FaultRates>;
  for (const name of Object.keys(FaultKind) as Array<keyof FaultRates>) {
    const value: unknown = rates[name] === undefined ? 0 : rates[name];
    if (typeof value !== 'number' || !(value >= 0 && value <= 1)) {
      throw new RangeError(
        `fault proxy: rate \`${name}\` must be a number from 0 to 1; got ${String(value)}`,
      );
    }
    checked[name] = value;
  }
  return checked;
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function answer(res: ServerResponse, status: number, title: string, detail: string): void {
  res.writeHead(status, { 'content-type': 'application/problem+json' });
  res.end(JSON.stringify({ title, status, detail: `fault proxy: ${detail}` }));
}

interface Upstream {
  status: number;
  headers: Record<string, string | string[]>;
  body: Buffer;
}

/** Starts a fault proxy on 127.0.0.1. */
export async function createFaultProxy(options: FaultProxyOptions): Promise<FaultProxy> {
  const target = new URL(String(options.target));
  if (target.protocol !== 'http:') throw new RangeError('fault proxy: `target` must be an http:// URL');
  let rates = checkRates(options.rates);
  const random = seededRandom(options.seed ?? 1);
  const maxDelayMs = options.maxDelayMs ?? 100;
  const dropModes = options.dropModes ?? ['reset', '502', 'timeout'];
  if (dropModes.length === 0) throw new RangeError('fault proxy: `dropModes` must not be empty');
  const holdMs = options.holdMs ?? 30_000;
  // Closed before the consumer's keep-alive timeout (5 s) could close one under a reused request.
  const agent = new Agent({ keepAlive: true, maxSockets: 64, timeout: 4000 });
  const stats: FaultStats = {
    requests: 0,
    forwarded: 0,
    injected: { drop: 0, 'drop-response': 0, duplicate: 0, delay: 0, reorder: 0, error: 0 },
    drops: { reset: 0, '502': 0, timeout: 0 },
    outcomes: {},
    replayed: 0,
  };
  const busy = new Set<Promise<unknown>>();
  const track = <T>(p: Promise<T>): Promise<T> => {
    busy.add(p);
    p.finally(() => busy.delete(p)).catch(() => {});
    return p;
  };
  /** Reordered requests, until a later request has been forwarded past them. */
  let overtaken: Array<() => void> = [];
  const held = new Set<ServerResponse>();

  function count(up: Upstream): void {
    let outcome = `http ${up.status}`;
    if (String(up.headers['content-type'] ?? '').includes('json')) {
      try {
        const parsed = JSON.parse(up.body.toString('utf8'));
        if (parsed && typeof parsed.status === 'string') outcome = parsed.status;
      } catch {}
    }
    stats.outcomes[outcome] = (stats.outcomes[outcome] ?? 0) + 1;
    if (up.headers['idempotent-replayed'] === 'true') stats.replayed++;
  }

  function forward(req: IncomingMessage, body: Buffer): Promise<Upstream> {
    stats.forwarded++;
    const released = overtaken;
    overtaken = [];
    for (const release of released) release();
    const headers = { ...endToEnd(req.headers), 'content-length': String(body.length) };
    return new Promise<Upstream>((resolve, reject) => {
      const where = { host: target.hostname, port: target.port, path: req.url, method: req.method };
      const up = request({ ...where, headers, agent }, (res) => {
        readBody(res).then((b) => {
          const out: Upstream = { status: res.statusCode ?? 502, headers: endToEnd(res.headers), body: b };
          count(out);
          resolve(out);
        }, reject);
      });
      up.on('error', reject);
      up.end(body);
    });
  }

  const sleep = (ms: number, early?: (wake: () => void) => void) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      early?.(() => {
        clearTimeout(timer);
        resolve();
      });
    });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    stats.requests++;
    // Every request draws the same number of values: the n-th request's fate depends on the seed and n only.
    const [rError, rDrop, rDropResponse, rDuplicate, rReorder, rDelay, rMode, rAmount] = Array.from(
      { length: 8 },
      random,
    );
    const body = await readBody(req);
    if (rError < rates.error) {
      stats.injected.error++;
      answer(res, 500, 'Injected failure', 'error');
      return;
    }
    if (rDrop < rates.drop) {
      stats.injected.drop++;
      const mode = dropModes[Math.floor(rMode * dropModes.length)];
      stats.drops[mode]++;
      if (mode === 'reset') req.socket.resetAndDestroy();
      else if (mode === '502') answer(res, 502, 'Bad gateway', 'dropped');
      else {
        held.add(res);
        await sleep(holdMs, (wake) => res.once('close', wake));
        held.delete(res);
        if (!res.writableEnded) req.socket.destroy();
      }
      return;
    }
    if (rReorder < rates.reorder) {
      stats.injected.reorder++;
      await sleep(maxDelayMs, (wake) => overtaken.push(wake));
    } else if (rDelay < rates.delay) {
      stats.injected.delay++;
      await sleep(Math.floor(rAmount * maxDelayMs));
    }
    if (rDuplicate < rates.duplicate) {
      stats.injected.duplicate++;
      const copyDelay = Math.floor(rAmount * maxDelayMs);
      track(sleep(copyDelay).then(() => forward(req, body))).catch(() => {});
    }
    let up: Upstream;
    try {
      up = await forward(req, body);
    } catch {
      stats.outcomes.unreachable = (stats.outcomes.unreachable ?? 0) + 1;
      answer(res, 502, 'Bad gateway', 'consumer unreachable');
      return;
    }
    if (rDropResponse < rates.dropResponse) {
      stats.injected['drop-response']++;
      req.socket.resetAndDestroy();
      return;
    }
    res.writeHead(up.status, up.headers);
    res.end(up.body);
  }

  const server: Server = createServer((req, res) => {
    track(handle(req, res)).catch(() => {
      if (!res.headersSent) {
        res.writeHead(502);
        res.end();
      } else req.socket.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    stats: () => structuredClone(stats),
    setRates(next) {
      rates = checkRates(next);
    },
    async idle() {
      while (busy.size > 0) await Promise.allSettled([...busy]);
    },
    async close() {
      for (const res of held) res.destroy();
      for (const release of overtaken) release();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.allSettled([...busy]);
      agent.destroy();
    },
  };
}
