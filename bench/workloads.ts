/**
 * The workloads: generators of deliveries. Every id starts with the measurement's prefix, so
 * one measurement's effects can be read back from the ledger apart from all others.
 */

export interface BenchDelivery {
  id: string;
  key?: string;
  seq?: number;
  body: string;
}

/** A delivery as the request autocannon sends: its id, and its key and seq when it has them. */
export function toRequest(d: BenchDelivery) {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'idempotency-key': d.id };
  if (d.key !== undefined) {
    headers['x-key'] = d.key;
    headers['x-seq'] = String(d.seq);
  }
  return { method: 'POST', path: '/webhooks', headers, body: d.body };
}

export interface Workload {
  description: string;
  /** Deliveries sent (untimed) before the measurement, e.g. the ids a replay repeats. */
  seed?: (prefix: string) => { count: number; next: () => BenchDelivery };
  next: (prefix: string) => () => BenchDelivery;
}

const ACCOUNTS = 1000;
const KEYS = 1000;
const WINDOW = 8;
// Fewer keys than `ordered`, so that every key gets several windows within a short measurement.
const SHUFFLED_KEYS = 100;

function unordered(id: string, n: number): BenchDelivery {
  return { id, body: `{"account":"a${n % ACCOUNTS}","amount":1}` };
}

function pick<T>(items: readonly T[]): T {
  return items[Math.floor(Math.random() * items.length)];
}

/** Shuffles `items` in place (Fisher–Yates), and returns them. */
export function shuffle<T>(items: T[], random = Math.random): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

const SEEDED = 2000;

export const WORKLOADS: Record<string, Workload> = {
  unique: {
    description: 'every delivery a new event (unordered), spread over 1000 accounts',
    next: (prefix) => {
      let n = 0;
      return () => unordered(`${prefix}u${n}`, n++);
    },
  },
  dup50: {
    description: 'half the deliveries repeat one of the last 1000 events sent (some still in flight)',
    next: (prefix) => {
      let n = 0;
      const recent: BenchDelivery[] = [];
      return () => {
        if (recent.length > 0 && Math.random() < 0.5) return pick(recent);
        const d = unordered(`${prefix}u${n}`, n++);
        if (recent.length < 1000) recent.push(d);
        else recent[n % 1000] = d;
        return d;
      };
    },
  },
  replay: {
    description: `every delivery a duplicate of one of ${SEEDED} events applied before the measurement`,
    seed: (prefix) => {
      let n = 0;
      return { count: SEEDED, next: () => unordered(`${prefix}s${n}`, n++) };
    },
    next: (prefix) => () => {
      const n = Math.floor(Math.random() * SEEDED);
      return unordered(`${prefix}s${n}`, n);
    },
  },
  storm: {
    description:
      'retry storm: 90% of deliveries repeat one of 4 hot events (changed every 200 deliveries), fired concurrently',
    next: (prefix) => {
      let n = 0;
      let wave = -1;
      let hot: BenchDelivery[] = [];
      return () => {
        n++;
        const w = Math.floor(n / 200);
        if (w !== wave) {
          wave = w;
          hot = Array.from({ length: 4 }, (_, j) => unordered(`${prefix}h${w}-${j}`, w * 4 + j));
        }
        return Math.random() < 0.9 ? pick(hot) : unordered(`${prefix}u${n}`, n);
      };
    },
  },
  ordered: {
    description: `ordered events over ${KEYS} keys, each key's seqs sent in order (keys round-robin)`,
    next: (prefix) => {
      let i = 0;
      return () => {
        const k = i % KEYS;
        const seq = Math.floor(i / KEYS) + 1;
        i++;
        return { id: `${prefix}k${k}-${seq}`, key: `${prefix}k${k}`, seq, body: '{"amount":1}' };
      };
    },
  },
  shuffled: {
    description: `ordered events over ${SHUFFLED_KEYS} keys, each key's seqs shuffled within windows of ${WINDOW} (held, then drained)`,
    next: (prefix) => {
      let i = 0;
      const perms = new Map<number, number[]>();
      return () => {
        const k = i % SHUFFLED_KEYS;
        const round = Math.floor(i / SHUFFLED_KEYS);
        i++;
        const block = Math.floor(round / WINDOW);
        const pos = round % WINDOW;
        if (pos === 0 || !perms.has(k)) perms.set(k, shuffle(Array.from({ length: WINDOW }, (_, i) => i)));
        const seq = block * WINDOW + perms.get(k)![pos] + 1;
        return { id: `${prefix}k${k}-${seq}`, key: `${prefix}k${k}`, seq, body: '{"amount":1}' };
      };
    },
  },
};

const BASELINES = ['hello', 'bare', 'handmade', 'naive'];
const PEERS = ['node-idempotency', 'express-idempotency'];

/** What `npm run bench` measures: the cells every goal row and ratio column needs, no more. */
export const DEFAULT: Record<string, string[]> = {
  unique: [...BASELINES, ...PEERS, 'inbox', 'inbox-deferred', 'inbox-redis', 'inbox-pglite', 'bare-pglite'],
  dup50: ['naive', 'inbox', 'inbox-redis', 'inbox-pg'],
  replay: ['hello', 'naive', 'inbox', 'inbox-redis', 'inbox-pg'],
  storm: ['naive', 'inbox', 'inbox-redis', 'inbox-pg'],
  ordered: ['inbox'],
  shuffled: ['naive', 'inbox'],
};

/** `--citus`: the inbox on DATABASE_URL beside it on the Citus cluster, one worker and two. */
export const CITUS: Record<string, string[]> = {
  unique: ['inbox', 'inbox-citus-1w', 'inbox-citus'],
  ordered: ['inbox', 'inbox-citus-1w', 'inbox-citus'],
};

/** The full grid (`--full`): DEFAULT, the inbox on its other adapters, the peers under duplicates. */
export const MATRIX: Record<string, string[]> = {
  unique: [...DEFAULT.unique, 'inbox-koa', 'inbox-fastify'],
  dup50: [...DEFAULT.dup50, ...PEERS],
  replay: [...DEFAULT.replay, ...PEERS],
  storm: [...DEFAULT.storm, 'handmade', ...PEERS],
  ordered: DEFAULT.ordered,
  shuffled: DEFAULT.shuffled,
};
