/**
 * The Redis fast path for duplicates (docs/redis.md). Redis is a cache,
 * never the truth: an entry is written only after a delivery COMMITTED as processed, and
 * anything short of a clean, fast hit (a miss, an error, a timeout, a client that is not
 * connected) falls through to Postgres, which decides exactly as it would without Redis.
 *
 * Why a stale entry cannot turn a new event into a duplicate: entries exist only for events
 * Postgres already holds as processed under the same (source, id) — the source is part of the
 * Redis key — and a processed event never becomes anything else. The entry also carries the
 * body hash, key and seq, so a delivery that reuses the id with another body, key or seq gets
 * the same 422 the claim would give.
 */
import type { Logger } from '../observability/logger.js';
import type { CachedEvent } from './processed-cache.js';

/**
 * The subset of an ioredis client the fast path uses. Anything shaped like it works; when
 * `status` is present (ioredis), commands are only sent while it is `'ready'` (or `'wait'`,
 * not connected yet), so a disconnected client costs a delivery nothing.
 */
export interface RedisLike {
  get(key: string): Promise<string | null>;
  set(key: string, value: string, expiryMode: 'PX', milliseconds: number): Promise<unknown>;
  ping?(): Promise<unknown>;
  readonly status?: string;
}

/** A Redis client the inbox created from a URL, and so closes. */
interface OwnedRedis extends RedisLike {
  connect(): Promise<void>;
  quit(): Promise<unknown>;
  disconnect(): void;
  on(event: 'error', listener: (err: Error) => void): unknown;
}

/** What option `redis` accepts: a `redis://` / `rediss://` URL, or an ioredis-shaped client. */
export type RedisInput = string | RedisLike;

/** Why a lookup went to Postgres instead (a label of `webhook_inbox_redis_fallbacks_total`). */
export type FallbackReason = 'miss' | 'timeout' | 'error' | 'unavailable' | 'busy';

export type Lookup = { hit: true; event: CachedEvent } | { hit: false; reason: FallbackReason };

export interface CacheHooks {
  fallback(reason: FallbackReason): void;
  writeError(): void;
}

/**
 * Commands sent but not yet answered. A slow or paused Redis must not turn every delivery
 * into a command queued in this process: past this many, deliveries skip Redis altogether.
 */
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
    // The source is URI-encoded so that it contains no ':' and `${source}:${id}` splits one way only:
    // sources 'a:b' + id 'c' and 'a' + id 'b:c' must never share an entry.
    this.#prefix = `${options.prefix}${encodeURIComponent(options.source)}:`;
    this.#timeoutMs = options.timeoutMs;
    this.#ttlMs = options.ttlMs;
    this.#hooks = hooks;
  }

  /** The Redis key of an event: `${prefix}${source}:${id}`. */
  keyOf(id: string): string {
    return this.#prefix + id;
  }

  #available(): boolean {
    // 'wait': a lazyConnect client nobody used yet; its first command connects it.
    const status = this.#client.status;
    return status === undefined || status === 'ready' || status === 'wait';
  }

  /** Runs one command, bounded by `timeoutMs`; settles `undefined` plus a reason on any failure. */
  #bounded<T>(run: () => Promise<T>, timeoutMs: number): Promise<{ value: T } | { reason: FallbackReason }> {
    if (!this.#available() || Date.now() < this.#pausedUntil)
      return Promise.resolve({ reason: 'unavailable' });
    if (this.#outstanding >= MAX_OUTSTANDING) return Promise.resolve({ reason: 'busy' });
    this.#outstanding++;
    return new Promise((resolve) => {
      let done = false;
      // When the timer fires, Redis's answer may be waiting unread: a busy event loop (a retry
      // storm on a saturated core) runs due timers before it reads its sockets. Giving up there
      // would call a Redis that answered in time slow, pause it after three such, and send a
      // storm's duplicates to Postgres. `setImmediate` runs after the sockets are read: an answer
      // that has arrived wins; only one that has not is a timeout.
      const timer = setTimeout(() => {
        setImmediate(() => {
          if (done) return;
          done = true;
          this.#failed();
          resolve({ reason: 'timeout' });
        });
      }, timeoutMs);
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
          if (done) return;
          done = true;
          clearTimeout(timer);
          this.#failures = 0;
          resolve({ value });
        },
        () => {
          this.#outstanding--;
          if (done) return;
          done = true;
          clearTimeout(timer);
          this.#failed();
          resolve({ reason: 'error' });
        },
      );
    });
  }

  #failed(): void {
    // A Redis that keeps failing would add `timeoutMs` to every delivery: pause it briefly.
    if (++this.#failures >= FAILURES_TO_PAUSE) this.#pausedUntil = Date.now() + PAUSE_MS;
  }

  /** One GET. Never rejects: anything but a well-formed hit is a fallback to Postgres. */
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

  /**
   * One SET, after the event's transaction committed as processed. `resultJson` is the JSON
   * text Postgres stored (or undefined: no result). Never rejects; failures are counted.
   * Callers do not await it before answering: it must not delay the response.
   */
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

  /** `'up'` when a PING answers within `timeoutMs`. */
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

  /** Closes the client if the inbox created it; a client the application passed stays open. */
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

/**
 * Creates the ioredis client for a URL: connects in the background (the inbox does not wait
 * for Redis to start), refuses commands while disconnected instead of buffering them
 * (`enableOfflineQueue: false`), never retries a command (`maxRetriesPerRequest: 0`: the
 * fallback is Postgres, not a retry), and reconnects with capped, jittered backoff.
 *
 * Commands issued in the same pass of the event loop go out in one write
 * (`enableAutoPipelining`). Sent one by one, each GET would be a socket write of its own: in a
 * retry storm answered from Redis, those writes are the largest share of the server's CPU per
 * duplicate (BENCHMARKS.md).
 */
export async function connectRedis(url: string, logger: Logger): Promise<RedisLike> {
  let Redis: any;
  try {
    const mod: any = await import('ioredis');
    Redis = mod.Redis ?? mod.default;
  } catch (err) {
    throw new Error('webhook-inbox: option `redis` is a URL, which needs the `ioredis` package installed', {
      cause: err,
    });
  }
  const client: OwnedRedis = new Redis(url, {
    lazyConnect: true,
    enableAutoPipelining: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectTimeout: 2000,
    // Capped exponential backoff with jitter, so that instances do not reconnect in lockstep.
    retryStrategy: (times: number) =>
      50 + Math.floor(Math.random() * Math.min(5000, 100 * 2 ** Math.min(times, 6))),
  });
  let warned = false;
  client.on('error', (err) => {
    // ioredis emits one error per failed reconnect; say it once per outage.
    if (!warned) logger.warn({ err }, 'webhook-inbox: Redis unavailable; duplicates go to Postgres');
    warned = true;
  });
  (client as any).on('ready', () => {
    warned = false;
  });
  client.connect().catch(() => {});
  return client;
}
