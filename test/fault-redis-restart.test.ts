/**
 * Redis stopped and restarted mid-stream, end to end: a private `redis-server` (never the
 * shared one) behind the ledger's Redis fast path. While it is down, every delivery gets the
 * same outcome it would have had (Postgres answers the duplicates), the metrics say why Redis
 * was skipped, and health says `redis: 'down'`; once it is back, the client reconnects on its
 * own and a storm's duplicates are answered by Redis again. The ledger applies each event once.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { postgresTarget, type TargetDb, uniqueName } from './support/databases.js';
import { type PrivateRedis, redisServerAvailable, startPrivateRedis } from './support/private-servers.js';

const uid = (p: string) => `${p}_${randomBytes(6).toString('hex')}`;

describe.skipIf(!postgresTarget || !redisServerAvailable())('Redis stopped and restarted mid-stream', () => {
  let db: TargetDb;
  let redis: PrivateRedis;
  let app: LedgerServer;
  let registry: Registry;
  const schema = uniqueName('wi');
  const ledgerSchema = uniqueName('app');
  const key = uid('acct');
  let expectedBalance = 0;

  beforeAll(async () => {
    db = await postgresTarget!.open();
    redis = await startPrivateRedis();
    registry = new Registry();
    app = await startLedger({
      ledgerSchema,
      inbox: {
        db: db.db,
        schema,
        sweepIntervalMs: 0,
        // No in-process duplicate cache: every duplicate goes to Redis, or to Postgres.
        duplicateCacheSize: 0,
        redis: redis.url,
        // The outcomes are what this pins, not Redis's latency: on a machine busy with other
        // test files a GET or SET can take longer than the 50 ms default, and a timed-out one
        // falls back to Postgres (or leaves no entry) as designed, which the counts below
        // would read as Redis not answering. A stopped Redis still fails at once: commands
        // are not sent while the client is not connected.
        redisTimeoutMs: 5_000,
        redisPrefix: `${schema}:`,
        metrics: { registry },
      },
    });
  });
  afterAll(async () => {
    if (app) {
      await sql`drop schema if exists ${sql.id(schema)}, ${sql.id(ledgerSchema)} cascade`.execute(
        await app.inbox.kysely(),
      );
      await app.close();
    }
    await redis?.destroy();
    await db?.close();
  });

  const counter = async (name: string, labels: Record<string, string>) => {
    const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === name);
    const values = (metric?.values ?? []) as { labels: Record<string, string>; value: number }[];
    return values
      .filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))
      .reduce((sum, v) => sum + v.value, 0);
  };
  const post = async (id: string, amount: number) => {
    const res = await fetch(`${app.url}/webhooks`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'idempotency-key': id,
        'x-key': key,
        'x-seq': String(seqOf(id)),
      },
      body: JSON.stringify({ amount }),
    });
    return { status: res.status, body: (await res.json()) as { status: string; id: string } };
  };
  const seqs = new Map<string, number>();
  const seqOf = (id: string) => {
    if (!seqs.has(id)) seqs.set(id, seqs.size + 1);
    return seqs.get(id)!;
  };

  /**
   * New events, then two copies of each: what every phase sends. While duplicates are rare a
   * new event is not written to Redis; the first copies (Postgres answers them) write it, and by
   * the second copies most deliveries are duplicates, so the inbox asks Redis first
   * (src/dedup/duplicate-odds.ts).
   */
  async function phase(n: number): Promise<string[]> {
    const ids = Array.from({ length: n }, () => uid('evt'));
    for (const id of ids) {
      const r = await post(id, 1);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.status).toBe('processed');
      expectedBalance += 1;
    }
    for (const round of [1, 2]) {
      for (const id of ids) {
        const r = await post(id, 1);
        expect(r.body, `copy ${round}`).toMatchObject({ status: 'duplicate', id });
      }
      await app.inbox.idle(); // the Redis writes of the copies Postgres answered
    }
    return ids;
  }

  test('outcomes do not change, the metrics show the outage, the client reconnects', async () => {
    const before = await phase(20);
    const byRedis = await counter('webhook_inbox_duplicates_total', { answered_by: 'redis' });
    // The second copies.
    expect(byRedis).toBe(20);
    expect(await counter('webhook_inbox_duplicates_total', { answered_by: 'postgres' })).toBe(20);

    await redis.stop();
    const fallbacksBefore = await counter('webhook_inbox_redis_fallbacks_total', {});
    const during = await phase(20);
    // Duplicates of events processed before the outage too: Postgres answers them now.
    for (const id of before) expect((await post(id, 1)).body.status).toBe('duplicate');
    expect(await counter('webhook_inbox_duplicates_total', { answered_by: 'redis' })).toBe(byRedis);
    expect(await counter('webhook_inbox_duplicates_total', { answered_by: 'postgres' })).toBe(20 + 40 + 20);
    // The deliveries that asked Redis during the outage fell back, and say why (unavailable,
    // error or timeout): none of them a miss.
    const fallbacks = (await counter('webhook_inbox_redis_fallbacks_total', {})) - fallbacksBefore;
    expect(fallbacks).toBeGreaterThanOrEqual(20);
    expect(await counter('webhook_inbox_redis_fallbacks_total', { reason: 'miss' })).toBeLessThanOrEqual(
      fallbacksBefore,
    );
    expect(await app.inbox.health()).toMatchObject({ ok: true, redis: 'down' });

    await redis.start();
    // The client reconnects with its own backoff; health's PING says when.
    await vi.waitFor(async () => expect((await app.inbox.health()).redis).toBe('up'), {
      timeout: 20_000,
      interval: 100,
    });
    await phase(20);
    // At least the second copies (the first new events, sent while the odds were still high
    // from the storm before them, were written at their COMMIT: their first copies may hit too).
    expect(await counter('webhook_inbox_duplicates_total', { answered_by: 'redis' })).toBeGreaterThanOrEqual(
      byRedis + 20,
    );
    // The restarted Redis is empty: events of before and during the outage are Postgres's to answer.
    for (const id of [...before.slice(0, 5), ...during.slice(0, 5)]) {
      expect((await post(id, 1)).body.status).toBe('duplicate');
    }

    const account = await app.ledger.account(await app.inbox.kysely(), key);
    expect(account.balance).toBe(expectedBalance);
    expect(account.entries.map((e) => e.seq)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
  }, 60_000);
});
