import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { connectRedis, RedisCache } from '../src/dedup/redis-cache.js';
import { createInbox, type Inbox, InboxOptionsError, type Outcome } from '../src/index.js';
import { silent } from '../src/observability/logger.js';
import { CountingPool } from './support/counting-pool.js';
import { postgresTarget, postgresUrl, redisUrl, type TargetDb, uniqueName } from './support/databases.js';
import { getJson, post } from './support/http.js';
import { startTcpProxy, type TcpProxy } from './support/tcp-proxy.js';

let n = 0;
const uid = (label: string) => `${label}-${process.pid}-${++n}`;
const prefixFor = () => `${uniqueName('test')}:`;

function delivery(id: string, body: unknown, key?: string, seq?: number) {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'idempotency-key': id };
  if (key !== undefined) headers['x-key'] = key;
  if (seq !== undefined) headers['x-seq'] = String(seq);
  return { headers, rawBody: Buffer.from(JSON.stringify(body)) };
}

/** What a sender sees of an outcome. */
const seen = (o: Outcome) => ({ status: o.status, headers: o.headers, body: o.body });

async function metricValue(
  registry: Registry,
  name: string,
  labels: Record<string, string>,
): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return Number.NaN;
  const { values } = await metric.get();
  const hit = values.find((v) => Object.entries(labels).every(([k, want]) => v.labels[k] === want));
  return hit?.value ?? 0;
}

const redisPort = redisUrl ? Number(new URL(redisUrl).port || 6379) : 6379;

/** Deletes what a test wrote under its prefix: the Redis server is shared. */
async function dropPrefix(prefix: string): Promise<void> {
  const redis = new Redis(redisUrl!);
  const keys = await redis.keys(`${prefix}*`);
  if (keys.length) await redis.del(...keys);
  await redis.quit();
}

describe.skipIf(!postgresTarget || !redisUrl)('the Redis fast path (real Postgres, real Redis)', () => {
  let t: TargetDb;
  let pool: CountingPool;
  let app: LedgerServer;
  let url: string;
  let plain: Inbox;
  let redis: Redis;
  let registry: Registry;
  let prefix: string;

  beforeAll(async () => {
    t = await postgresTarget!.open();
    pool = new CountingPool(postgresUrl!);
    prefix = prefixFor();
    registry = new Registry();
    redis = new Redis(redisUrl!);
    app = await startLedger({
      testHooks: true,
      ledgerSchema: t.appSchema,
      // The ingest inbox would share the counted pool, its workers' statements among the counts.
      ingest: false,
      inbox: {
        db: pool,
        schema: t.schema,
        sweepIntervalMs: 0,
        redis: redisUrl!,
        redisPrefix: prefix,
        // These tests count what Redis answers: on a busy machine (the whole suite on two cores)
        // a GET past the default 50 ms falls back to Postgres, rightly, and adds a round trip.
        // The fallback on a slow GET is tested below, through a proxy that delays it.
        redisTimeoutMs: 5000,
        metrics: { registry },
        // No in-process LRU: every duplicate here is one another instance processed.
        duplicateCacheSize: 0,
      },
    });
    url = `${app.url}/webhooks`;
    // The same inbox (same tables, same source) without Redis: what Postgres alone answers.
    plain = createInbox({
      db: pool,
      schema: t.schema,
      sweepIntervalMs: 0,
      duplicateCacheSize: 0,
      handle: app.ledger.handle,
    });
    await plain.ready();
  });
  afterAll(async () => {
    await app?.close();
    await plain?.close();
    await redis?.quit();
    await dropPrefix(prefix);
    await pool?.end();
    await t?.close();
  });

  const account = (key: string) => getJson(`${app.url}/accounts/${encodeURIComponent(key)}`);

  /**
   * A retry storm, as an inbox sees one: copies of a processed event until Redis answers one
   * with no Postgres query. An inbox looks in Redis before BEGIN only while most deliveries are
   * duplicates (src/dedup/duplicate-odds.ts); the copies Postgres answered first wrote the
   * event to Redis. Returns how many copies Postgres answered.
   */
  async function stormUntilRedisAnswers(inbox: Inbox, copy: ReturnType<typeof delivery>): Promise<number> {
    for (let byPostgres = 0; byPostgres < 16; byPostgres++) {
      pool.reset();
      expect((await inbox.receive(copy)).kind).toBe('duplicate');
      const statements = pool.statements.length;
      await inbox.idle(); // the SET of a copy Postgres answered
      if (statements === 0) return byPostgres;
    }
    throw new Error('16 copies of one event and Redis never answered');
  }

  it('while duplicates are rare a new event costs Redis nothing; in a storm Redis answers them with zero Postgres queries', async () => {
    const id = uid('dup');
    const misses = () => metricValue(registry, 'webhook_inbox_redis_fallbacks_total', { reason: 'miss' });
    const missesBefore = await misses();
    const first = await post(url, { amount: 4 }, { 'Idempotency-Key': id });
    expect(first.body).toMatchObject({ status: 'processed', id });
    await app.inbox.idle();
    // No GET before it (no miss counted), no SET after it.
    expect(await misses()).toBe(missesBefore);
    expect(await redis.get(`${prefix}default:${id}`)).toBeNull();

    // The first copy: Postgres answers (BEGIN with the claim, COMMIT) and writes it to Redis.
    pool.reset();
    const copy = await post(url, { amount: 4 }, { 'Idempotency-Key': id });
    expect(copy.body).toEqual({ status: 'duplicate', id, result: first.body.result });
    expect(pool.statements).toHaveLength(2);
    await app.inbox.idle();
    expect(JSON.parse((await redis.get(`${prefix}default:${id}`))!)).toMatchObject({ r: first.body.result });

    // More copies: once most deliveries are duplicates, Redis answers them.
    expect(await stormUntilRedisAnswers(app.inbox, delivery(id, { amount: 4 }))).toBeLessThan(10);
    pool.reset();
    const byRedis = await metricValue(registry, 'webhook_inbox_duplicates_total', { answered_by: 'redis' });
    for (let i = 0; i < 5; i++) {
      const again = await post(url, { amount: 4 }, { 'Idempotency-Key': id });
      expect(again.status).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.body).toEqual({ status: 'duplicate', id, result: first.body.result });
    }
    const reused = await post(url, { amount: 5 }, { 'Idempotency-Key': id });
    expect(reused.status).toBe(422);
    expect(reused.body.field).toBe('body');
    expect(pool.statements).toHaveLength(0);
    expect(await metricValue(registry, 'webhook_inbox_duplicates_total', { answered_by: 'redis' })).toBe(
      byRedis + 5,
    );

    // Without Redis the same duplicate costs BEGIN with the claim, then COMMIT.
    pool.reset();
    expect((await plain.receive(delivery(id, { amount: 4 }))).kind).toBe('duplicate');
    expect(pool.statements).toHaveLength(2);

    // A new event in the storm pays the GET (a miss) and the SET after its COMMIT, and the same
    // Postgres round trips as a bare transaction of the ledger's two statements: BEGIN with the
    // claim, the two, the result with COMMIT.
    pool.reset();
    const fresh = uid('new');
    const missesInStorm = await misses();
    expect((await app.inbox.receive(delivery(fresh, { amount: 1 }))).kind).toBe('processed');
    expect(pool.statements).toHaveLength(4);
    expect(await misses()).toBe(missesInStorm + 1);
    await app.inbox.idle();
    expect(await redis.get(`${prefix}default:${fresh}`)).not.toBeNull();

    expect((await account('none')).entries.filter((e: { id: string }) => e.id === id)).toHaveLength(1);
  });

  it('answers every reuse of a processed id exactly as Postgres does', async () => {
    const u = uid('unordered');
    const o = uid('ordered');
    const key = uid('acct');
    expect((await app.inbox.receive(delivery(u, { amount: 2 }))).kind).toBe('processed');
    expect((await app.inbox.receive(delivery(o, { amount: 3 }, key, 1))).kind).toBe('processed');
    await app.inbox.idle();
    // A storm of u's copies; one copy of o, which writes it to Redis if its COMMIT did not.
    await stormUntilRedisAnswers(app.inbox, delivery(u, { amount: 2 }));
    expect((await app.inbox.receive(delivery(o, { amount: 3 }, key, 1))).kind).toBe('duplicate');
    await app.inbox.idle();
    const probes = [
      delivery(u, { amount: 2 }), // duplicate
      delivery(u, { amount: 9 }), // another body: 422 body
      delivery(u, { amount: 2 }, uid('other'), 1), // a key it did not have: 422 key
      delivery(o, { amount: 3 }, key, 1), // duplicate
      delivery(o, { amount: 8 }, key, 1), // 422 body
      delivery(o, { amount: 3 }, key, 2), // 422 seq
      delivery(o, { amount: 3 }), // without its key: 422 key
    ];
    for (const probe of probes) {
      pool.reset();
      const fromRedis = await app.inbox.receive(probe);
      expect(pool.statements).toHaveLength(0);
      const fromPostgres = await plain.receive(probe);
      expect(seen(fromRedis)).toEqual(seen(fromPostgres));
    }
    expect((await account(key)).balance).toBe(3);
  });

  it('never writes or answers held, failed or not-yet-applied events from Redis', async () => {
    const key = uid('acct');
    const heldId = uid('held');
    const held = await post(url, { amount: 20 }, { 'Idempotency-Key': heldId, 'X-Key': key, 'X-Seq': '2' });
    expect(held.status).toBe(202);
    await app.inbox.idle();
    expect(await redis.get(`${prefix}default:${heldId}`)).toBeNull();
    expect(
      (await post(url, { amount: 20 }, { 'Idempotency-Key': heldId, 'X-Key': key, 'X-Seq': '2' })).status,
    ).toBe(202);

    // A handler that throws: nothing committed, nothing cached; the redelivery applies it.
    const failedKey = uid('flaky');
    await fetch(`${app.url}/fail-next`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key: failedKey }),
    });
    const failedId = uid('failed');
    const failing = await post(
      url,
      { amount: 7 },
      { 'Idempotency-Key': failedId, 'X-Key': failedKey, 'X-Seq': '1' },
    );
    expect(failing.status).toBe(500);
    await app.inbox.idle();
    expect(await redis.get(`${prefix}default:${failedId}`)).toBeNull();
    const retried = await post(
      url,
      { amount: 7 },
      { 'Idempotency-Key': failedId, 'X-Key': failedKey, 'X-Seq': '1' },
    );
    expect(retried.body).toMatchObject({ status: 'processed', result: { balance: 7 } });
    // Processed now: a copy that Postgres answers writes it to Redis (if its COMMIT did not).
    expect(
      (await post(url, { amount: 7 }, { 'Idempotency-Key': failedId, 'X-Key': failedKey, 'X-Seq': '1' }))
        .body,
    ).toMatchObject({ status: 'duplicate', result: { balance: 7 } });
    await app.inbox.idle();
    expect(JSON.parse((await redis.get(`${prefix}default:${failedId}`))!)).toMatchObject({
      k: failedKey,
      s: 1,
      r: { balance: 7 },
    });

    // Seq 1 arrives; the held seq 2 drains. Its duplicates are answered (by Postgres) as duplicates.
    expect(
      (await post(url, { amount: 1 }, { 'Idempotency-Key': uid('one'), 'X-Key': key, 'X-Seq': '1' })).status,
    ).toBe(200);
    await app.inbox.idle();
    const dup = await post(url, { amount: 20 }, { 'Idempotency-Key': heldId, 'X-Key': key, 'X-Seq': '2' });
    expect(dup.body).toMatchObject({ status: 'duplicate', result: { balance: 21 } });
    expect((await account(key)).entries.map((e: { seq: number }) => e.seq)).toEqual([1, 2]);
  });

  it('a stale entry of another source never makes a new event look like a duplicate', async () => {
    const handle = async (event: { source: string; id: string }) => ({ appliedBy: event.source });
    const inboxes = ['alpha', 'beta', 'a:b', 'a'].map((source) =>
      createInbox({
        db: pool,
        schema: t.schema,
        source,
        sweepIntervalMs: 0,
        redis,
        redisPrefix: prefix,
        duplicateCacheSize: 0,
        retention: '4d',
        handle,
      }),
    );
    const [alpha, beta, ab, a] = inboxes;
    try {
      // beta and a in a storm of their own: they look in Redis before every claim.
      for (const inbox of [beta, a]) {
        const warm = uid('warm');
        expect((await inbox.receive(delivery(warm, { n: 0 }))).kind).toBe('processed');
        await stormUntilRedisAnswers(inbox, delivery(warm, { n: 0 }));
      }
      const id = uid('shared');
      expect(seen(await alpha.receive(delivery(id, { n: 1 })))).toMatchObject({
        status: 200,
        body: { status: 'processed', result: { appliedBy: 'alpha' } },
      });
      // A copy, answered by Postgres, writes it to Redis.
      expect((await alpha.receive(delivery(id, { n: 1 }))).kind).toBe('duplicate');
      await alpha.idle();
      // The entry lives as long as the processed row does: `retention`.
      const ttl = await redis.pttl(`${prefix}alpha:${id}`);
      expect(ttl).toBeGreaterThan(4 * 86_400_000 - 60_000);
      expect(ttl).toBeLessThanOrEqual(4 * 86_400_000);
      // Same id, same body, another source: a new event there.
      expect((await beta.receive(delivery(id, { n: 1 }))).body).toMatchObject({
        status: 'processed',
        result: { appliedBy: 'beta' },
      });
      // Sources and ids that concatenate alike ('a:b' + 'c' and 'a' + 'b:c') stay apart.
      const suffix = uid('c');
      expect((await ab.receive(delivery(suffix, { n: 2 }))).kind).toBe('processed');
      expect((await ab.receive(delivery(suffix, { n: 2 }))).kind).toBe('duplicate');
      await ab.idle();
      expect(await redis.get(`${prefix}a%3Ab:${suffix}`)).not.toBeNull();
      expect((await a.receive(delivery(`b:${suffix}`, { n: 2 }))).body).toMatchObject({
        status: 'processed',
        result: { appliedBy: 'a' },
      });
      await a.idle();
      expect((await a.receive(delivery(`b:${suffix}`, { n: 2 }))).body).toMatchObject({
        status: 'duplicate',
      });
    } finally {
      await Promise.all(inboxes.map((i) => i.close()));
    }
    // A client the application passed stays open after close().
    expect(redis.status).toBe('ready');
    expect(await redis.ping()).toBe('PONG');
  });

  it('rejects bad Redis and metrics options at construction, naming the option', () => {
    const handle = async () => {};
    const cases: [Record<string, unknown>, string][] = [
      [{ redis: 'http://127.0.0.1:6379' }, 'redis'],
      [{ redis: { get() {} } }, 'redis'],
      [{ redisTimeoutMs: 0 }, 'redisTimeoutMs'],
      [{ redisPrefix: 5 }, 'redisPrefix'],
      [{ metrics: {} }, 'metrics'],
      [{ tracerProvider: {} }, 'tracerProvider'],
    ];
    for (const [options, option] of cases) {
      expect(() => createInbox({ handle, ...options } as any)).toThrow(InboxOptionsError);
      expect(() => createInbox({ handle, ...options } as any)).toThrow(`\`${option}\``);
    }
  });
});

describe.skipIf(!postgresTarget || !redisUrl)('when Redis goes away or slows down', () => {
  let t: TargetDb;
  let proxy: TcpProxy;
  let app: LedgerServer;
  let url: string;
  let registry: Registry;
  const prefix = prefixFor();

  beforeAll(async () => {
    t = await postgresTarget!.open();
    proxy = await startTcpProxy(redisPort);
    registry = new Registry();
    app = await startLedger({
      testHooks: true,
      ledgerSchema: t.appSchema,
      // The ingest inbox would share the counted pool, its workers' statements among the counts.
      ingest: false,
      inbox: {
        db: t.db,
        schema: t.schema,
        sweepIntervalMs: 0,
        redis: `redis://127.0.0.1:${proxy.port}`,
        redisPrefix: prefix,
        metrics: { registry },
        duplicateCacheSize: 0,
      },
    });
    url = `${app.url}/webhooks`;
    await vi.waitFor(async () => expect((await app.inbox.health()).redis).toBe('up'), { timeout: 10_000 });
  });
  afterAll(async () => {
    await app?.close();
    await proxy?.close();
    await dropPrefix(prefix);
    await t?.close();
  });

  const answeredByRedis = () =>
    metricValue(registry, 'webhook_inbox_duplicates_total', { answered_by: 'redis' });
  const health = async () => {
    const res = await fetch(`${url}/health`);
    return { status: res.status, body: await res.json() };
  };
  /** Copies of a processed event until Redis answers one (see the first describe's helper). */
  async function stormUntilRedisAnswers(send: () => Promise<{ status: number }>): Promise<void> {
    const before = await answeredByRedis();
    for (let i = 0; i < 16; i++) {
      expect((await send()).status).toBe(200);
      await app.inbox.idle();
      if ((await answeredByRedis()) > before) return;
    }
    throw new Error('16 copies of one event and Redis never answered');
  }

  it('stopped mid-run: same outcomes, same ledger, health degraded; back up, the fast path resumes', async () => {
    const key = uid('acct');
    const send = (id: string, amount: number, seq: number) =>
      post(url, { amount }, { 'Idempotency-Key': id, 'X-Key': key, 'X-Seq': String(seq) });
    const ids = Array.from({ length: 6 }, () => uid('ev'));

    expect((await send(ids[0], 1, 1)).body.status).toBe('processed');
    expect((await send(ids[1], 2, 2)).body.status).toBe('processed');
    await app.inbox.idle();
    await stormUntilRedisAnswers(() => send(ids[0], 1, 1));
    expect((await send(ids[0], 1, 1)).body).toMatchObject({ status: 'duplicate', result: { balance: 1 } });
    expect(await answeredByRedis()).toBe(2);
    expect(await health()).toMatchObject({ status: 200, body: { ok: true, postgres: 'up', redis: 'up' } });

    await proxy.stop();

    // The storm goes on while Redis is away: Postgres answers every copy.
    for (let i = 0; i < 8; i++) {
      expect((await send(ids[0], 1, 1)).body).toMatchObject({ status: 'duplicate', result: { balance: 1 } });
    }
    expect((await send(ids[2], 4, 3)).body).toMatchObject({ status: 'processed', result: { balance: 7 } });
    const dup = await send(ids[1], 2, 2);
    expect(dup.status).toBe(200);
    expect(dup.headers.get('idempotent-replayed')).toBe('true');
    expect(dup.body).toMatchObject({ status: 'duplicate', result: { balance: 3 } });
    expect((await send(ids[1], 99, 2)).status).toBe(422);
    expect((await send(ids[4], 16, 5)).status).toBe(202); // held: seq 4 is missing
    expect((await send(ids[3], 8, 4)).body).toMatchObject({ status: 'processed', result: { balance: 15 } });
    await app.inbox.idle();
    expect(await answeredByRedis()).toBe(2);
    const degraded = await health();
    expect(degraded).toMatchObject({
      status: 200,
      body: { ok: true, postgres: 'up', redis: 'down', held: 0 },
    });
    expect((await account()).balance).toBe(31);

    await proxy.start();
    await vi.waitFor(async () => expect((await app.inbox.health()).redis).toBe('up'), { timeout: 15_000 });
    expect((await send(ids[5], 32, 6)).body.status).toBe('processed');
    await app.inbox.idle();
    await stormUntilRedisAnswers(() => send(ids[5], 32, 6));
    expect((await send(ids[5], 32, 6)).body).toMatchObject({ status: 'duplicate', result: { balance: 63 } });
    expect(await answeredByRedis()).toBe(4);

    const ledger = await account();
    expect(ledger.balance).toBe(63);
    expect(ledger.entries.map((e: { seq: number }) => e.seq)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(
      await metricValue(registry, 'webhook_inbox_redis_fallbacks_total', { reason: 'unavailable' }),
    ).toBeGreaterThan(0);

    async function account() {
      return getJson(`${app.url}/accounts/${key}`);
    }
  });

  it('slow: a GET slower than redisTimeoutMs falls through to Postgres with the same outcome', async () => {
    const id = uid('slow');
    expect((await post(url, { amount: 5 }, { 'Idempotency-Key': id })).body.status).toBe('processed');
    await app.inbox.idle();
    await stormUntilRedisAnswers(() => post(url, { amount: 5 }, { 'Idempotency-Key': id }));
    const before = await metricValue(registry, 'webhook_inbox_redis_fallbacks_total', { reason: 'timeout' });

    proxy.setDelay(500); // ten times redisTimeoutMs (50)
    try {
      const again = await post(url, { amount: 5 }, { 'Idempotency-Key': id });
      expect(again.status).toBe(200);
      expect(again.body).toMatchObject({ status: 'duplicate', id });
      expect((await post(url, { amount: 6 }, { 'Idempotency-Key': id })).status).toBe(422);
      const other = uid('slow-new');
      expect((await post(url, { amount: 1 }, { 'Idempotency-Key': other })).body.status).toBe('processed');
      expect(
        await metricValue(registry, 'webhook_inbox_redis_fallbacks_total', { reason: 'timeout' }),
      ).toBeGreaterThan(before);
      const entries = (await getJson(`${app.url}/accounts/none`)).entries.map((e: { id: string }) => e.id);
      expect(entries.filter((e: string) => e === id || e === other)).toEqual([id, other]);
    } finally {
      proxy.setDelay(0);
      await app.inbox.idle();
    }
  });

  it('closes the Redis client it created from a URL', async () => {
    const name = uniqueName('wi');
    const inbox = createInbox({
      db: t.another(),
      schema: t.schema,
      sweepIntervalMs: 0,
      redis: `${redisUrl}?connectionName=${name}`,
      redisPrefix: prefixFor(),
      handle: async () => {},
    });
    const admin = new Redis(redisUrl!);
    try {
      await vi.waitFor(async () => expect((await inbox.health()).redis).toBe('up'), { timeout: 10_000 });
      expect(String(await admin.client('LIST'))).toContain(`name=${name}`);
      await inbox.close();
      await vi.waitFor(async () => expect(String(await admin.client('LIST'))).not.toContain(`name=${name}`));
    } finally {
      await inbox.close();
      await admin.quit();
    }
  });

  /** A RedisCache over the client the inbox makes from a URL, under a prefix of its own. */
  async function cacheFromUrl(timeoutMs: number, fallback: (reason: string) => void = () => {}) {
    const client: any = await connectRedis(redisUrl!, {
      debug: silent,
      info: silent,
      warn: silent,
      error: silent,
    });
    const prefix = prefixFor();
    const cache = new RedisCache(
      client,
      { prefix, source: 'default', timeoutMs, ttlMs: 60_000, owned: true },
      { fallback, writeError: () => {} },
    );
    return { client, cache, prefix };
  }

  it('an answer that came while the event loop was busy past redisTimeoutMs is a hit, not a timeout', async () => {
    const fallbacks: string[] = [];
    const { client, cache, prefix } = await cacheFromUrl(50, (reason) => fallbacks.push(reason));
    try {
      await vi.waitFor(() => expect(client.status).toBe('ready'));
      const ids = Array.from({ length: 5 }, (_, i) => uid(`busy-${i}`));
      await Promise.all(
        ids.map((id, i) => cache.remember(id, { hash: `h${i}`, key: null, seq: null }, `${i}`)),
      );
      // Five lookups in a row, each sent, then the process busy for 150 ms (a saturated core in
      // a retry storm): Redis answered within it, and its timer is due too when the loop turns.
      // Three timeouts in a row would also pause Redis for a second.
      const found = [];
      for (const id of ids) {
        const lookup = cache.lookup(id);
        await new Promise((resolve) => setImmediate(resolve)); // the GET is written
        const until = Date.now() + 150;
        while (Date.now() < until) {
          // busy
        }
        found.push(await lookup);
      }
      expect(found.map((f) => (f.hit ? f.event.result : f.reason))).toEqual([0, 1, 2, 3, 4]);
      expect(fallbacks).toEqual([]);
    } finally {
      await cache.close();
      await dropPrefix(prefix);
    }
  });

  it('the client made from a URL sends the GETs of one pass of the event loop in one write', async () => {
    const { client, cache, prefix } = await cacheFromUrl(1000);
    try {
      await vi.waitFor(() => expect(client.status).toBe('ready'));
      const ids = Array.from({ length: 50 }, (_, i) => uid(`pipelined-${i}`));
      await Promise.all(
        ids.map((id, i) => cache.remember(id, { hash: `h${i}`, key: null, seq: null }, `{"n":${i}}`)),
      );
      let writes = 0;
      const write = client.stream.write.bind(client.stream);
      client.stream.write = (...args: unknown[]) => {
        writes++;
        return write(...args);
      };
      // 50 deliveries in a storm asking Redis at once: one write, and each its own answer.
      const found = await Promise.all(ids.map((id) => cache.lookup(id)));
      expect(found.map((f) => (f.hit ? f.event.result : f.reason))).toEqual(ids.map((_, i) => ({ n: i })));
      expect(writes).toBe(1);
    } finally {
      await cache.close();
      await dropPrefix(prefix);
    }
  });
});
