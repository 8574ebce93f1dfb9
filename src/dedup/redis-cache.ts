/** Redis, a cache of processed events (never the truth): anything but a clean, fast hit asks Postgres. */
import type { Logger } from '../observability/logger.js';
import type { CachedEvent } from './processed-cache.js';

/** The subset of an ioredis client used; with `status`, commands go only while `'ready'` or `'wait'`. */
export interface RedisLike {
  get(key: string): Promise<string | null>;
  set(key: string, value: string, expiryMode: 'PX', milliseconds: number): Promise<unknown>;
  ping?(): Promise<unknown>;
  readonly status?: string;
}

interface OwnedRedis extends RedisLike {
  connect(): Promise<void>;
  quit(): Promise<unknown>;
  disconnect(): void;
  on(event: 'error', listener: (err: Error) => void): unknown;
}

/** What option `redis` accepts: a `redis://` / `rediss://` URL, or an ioredis-shaped client. */
export type RedisInput = string | RedisLike;

export type FallbackReason = 'miss' | 'timeout' | 'error' | 'unavailable' | 'busy';

export type Lookup = { hit: true; event: CachedEvent } | { hit: false; reason: FallbackReason };

export interface CacheHooks {
  fallback(reason: FallbackReason): void;
  writeError(): void;
}

/** Commands unanswered past which deliveries skip Redis: a slow Redis must not queue every delivery. */
const MAX_OUTSTANDING = 1000;
/** Consecutive failures (errors or timeouts) after which GETs pause, and for how long. */
const FAILURES_TO_PAUSE = 3;
const PAUSE_MS = 1000;

export class RedisCache {
  readonly #client: RedisLike;
  readonly #owned: OwnedRedis | undefined;
  readonly #prefix: string;
  readonly #timeoutMs: number;
  readonly #ttlMs: number;
  readonly #hooks: CacheHooks;
  #outstanding = 0;
  #failures = 0;
  #pausedUntil = 0;

  constructor(
    client: RedisLike,
    options: { prefix: string; source: string; timeoutMs: number; ttlMs: number; owned: boolean },
    hooks: CacheHooks,
  ) {
    this.#client = client;
    this.#owned = options.owned ? (client as OwnedRedis) : undefined;
    // URI-encoded, the source has no ':': `${source}:${id}` splits one way only.
    this.#prefix = `${options.prefix}${encodeURIComponent(options.source)}:`;
    this.#timeoutMs = options.timeoutMs;
    this.#ttlMs = options.ttlMs;
    this.#hooks = hooks;
  }

  keyOf(id: string): string {
    return this.#prefix + id;
  }

  #available(): boolean {
    const status = this.#client.status;
    return status === undefined || status === 'ready' || status === 'wait';
  }

  #bounded<T>(run: () => Promise<T>, timeoutMs: number): Promise<{ value: T } | { reason: FallbackReason }> {
    if (!this.#available() || Date.now() < this.#pausedUntil)
      return Promise.resolve({ reason: 'unavailable' });
    if (this.#outstanding >= MAX_OUTSTANDING) return Promise.resolve({ reason: 'busy' });
    this.#outstanding++;
    return new Promise((resolve) => {
      let done = false;
      const settle = (answer: { value: T } | { reason: FallbackReason }) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        if ('value' in answer) this.#failures = 0;
        else this.#failed();
        resolve(answer);
      };
      // Timers run before sockets are read: `setImmediate` lets an answer that has arrived win.
      const timer = setTimeout(() => setImmediate(() => settle({ reason: 'timeout' })), timeoutMs);
      timer.unref();
      let pending: Promise<T>;
      try {
        pending = run();
      } catch (err) {
        pending = Promise.reject(err);
      }
      pending.then(
        (value) => {
          this.#outstanding--;
          settle({ value });
        },
        () => {
          this.#outstanding--;
          settle({ reason: 'error' });
        },
      );
    });
  }

  #failed(): void {
    // A Redis that keeps failing would add `timeoutMs` to every delivery: pause it briefly.
    if (++this.#failures >= FAILURES_TO_PAUSE) this.#pausedUntil = Date.now() + PAUSE_MS;
  }

  async lookup(id: string): Promise<Lookup> {
    const answer = await this.#bounded(() => this.#client.get(this.keyOf(id)), this.#timeoutMs);
    let reason: FallbackReason;
    if ('value' in answer) {
      if (answer.value === null || answer.value === undefined) reason = 'miss';
      else {
        const event = decode(answer.value);
        if (event) return { hit: true, event };
        reason = 'error';
      }
    } else reason = answer.reason;
    this.#hooks.fallback(reason);
    return { hit: false, reason };
  }

  /** One SET, after the event committed as processed; not awaited before answering. Never rejects. */
  async remember(
    id: string,
    event: Omit<CachedEvent, 'result'>,
    resultJson: string | undefined,
  ): Promise<void> {
    const value = `{"h":${JSON.stringify(event.hash)},"k":${JSON.stringify(event.key)},"s":${event.seq === null ? 'null' : event.seq},"r":${resultJson ?? 'null'}}`;
    // Writes get more time than reads: nobody waits for them, and a lost write costs a Postgres claim later.
    const answer = await this.#bounded(
      () => this.#client.set(this.keyOf(id), value, 'PX', this.#ttlMs),
      Math.max(1000, this.#timeoutMs),
    );
    if (!('value' in answer)) this.#hooks.writeError();
  }

  async ping(timeoutMs: number): Promise<'up' | 'down'> {
    if (!this.#available()) return 'down';
    const client = this.#client;
    const run = client.ping ? () => client.ping!() : () => client.get(this.keyOf('\u0000ping'));
    // A health probe must work while GETs are paused: it is how "down" turns back into "up".
    const paused = this.#pausedUntil;
    this.#pausedUntil = 0;
    const answer = await this.#bounded(run, timeoutMs);
    if (!('value' in answer)) this.#pausedUntil = Math.max(this.#pausedUntil, paused);
    return 'value' in answer ? 'up' : 'down';
  }

  async close(): Promise<void> {
    if (!this.#owned) return;
    await this.#owned.quit().catch(() => this.#owned!.disconnect());
  }
}

function decode(raw: string): CachedEvent | undefined {
  try {
    const v = JSON.parse(raw);
    if (
      v &&
      typeof v.h === 'string' &&
      (v.k === null || typeof v.k === 'string') &&
      (v.s === null || typeof v.s === 'number')
    ) {
      return { hash: v.h, key: v.k, seq: v.s, result: v.r ?? null };
    }
  } catch {}
  return undefined;
}

/** An ioredis client for a URL: connects in the background, fails fast while down, never retries. */
export async function connectRedis(url: string, logger: Logger): Promise<RedisLike> {
  let Redis: any;
  try {
    const mod: any = await import('ioredis');
    Redis = mod.Redis ?? mod.default;
  } catch (err) {
    const message = 'webhook-inbox: option `redis` is a URL, which needs the `ioredis` package installed';
    throw new Error(message, { cause: err });
  }
  const client: OwnedRedis = new Redis(url, {
    lazyConnect: true,
    enableAutoPipelining: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectTimeout: 2000,
    retryStrategy: (times: number) =>
      50 + Math.floor(Math.random() * Math.min(5000, 100 * 2 ** Math.min(times, 6))),
  });
  let warned = false;
  client.on('error', (err) => {
    if (!warned) logger.warn({ err }, 'webhook-inbox: Redis unavailable; duplicates go to Postgres');
    warned = true;
  });
  (client as any).on('ready', () => {
    warned = false;
  });
  client.connect().catch(() => {});
  return client;
}
