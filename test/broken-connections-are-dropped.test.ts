/**
 * A connection whose socket failed under a query is handed back to its pool as broken, so that
 * the pool drops it and the next delivery gets a connection that works. What says it failed: the
 * error has no SQLSTATE. Node's socket errors carry a string `code` too (ECONNRESET, EPIPE), and
 * a SQLSTATE is exactly five characters of [0-9A-Z]: a reset connection taken for a PostgreSQL
 * error would go back to the pool as healthy, and fail the next delivery too.
 */
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createInbox, type Inbox, type PgClientLike, type PgPoolLike } from '../src/index.js';
import { postgresTarget, postgresUrl, type TargetDb } from './support/databases.js';
import { startTcpProxy, type TcpProxy } from './support/tcp-proxy.js';

/**
 * A pg-shaped pool of one connection, as a small adapter of the user's might be: it keeps its
 * client until `release` says it is broken (and reports nothing of the client's own events).
 */
class OneClientPool implements PgPoolLike {
  #client: pg.Client | undefined;
  /** Connections opened, and what each release said. */
  opened = 0;
  readonly releases: Array<boolean | Error | undefined> = [];
  constructor(readonly connectionString: string) {}
  async connect(): Promise<PgClientLike> {
    if (!this.#client) {
      const client = new pg.Client({ connectionString: this.connectionString });
      // Its failures reach the inbox through the failed query; the process must not crash.
      client.on('error', () => {});
      await client.connect();
      this.#client = client;
      this.opened++;
    }
    const client = this.#client;
    return {
      query: (config) => client.query(config as pg.QueryConfig),
      release: (err) => {
        this.releases.push(err);
        if (!err) return;
        this.#client = undefined;
        client.end().catch(() => {});
      },
    };
  }
  async end(): Promise<void> {
    await this.#client?.end();
  }
}

describe.runIf(postgresTarget)('broken connections are dropped (real Postgres)', () => {
  let t: TargetDb | undefined;
  let proxy: TcpProxy | undefined;
  let pool: OneClientPool | undefined;
  let inbox: Inbox | undefined;
  afterEach(async () => {
    await inbox?.close();
    await pool?.end();
    await proxy?.close();
    await t?.close();
  });

  it('a connection reset under a query (ECONNRESET): dropped, and the next delivery is acknowledged', async () => {
    t = await postgresTarget!.open();
    const target = new URL(postgresUrl!);
    proxy = await startTcpProxy(Number(target.port || 5432), target.hostname);
    const through = new URL(postgresUrl!);
    through.host = `127.0.0.1:${proxy.port}`;
    pool = new OneClientPool(through.toString());
    // Deferred mode's claim is a transaction of its own: nothing else is sent after it fails.
    inbox = createInbox({
      db: pool,
      schema: t.schema,
      mode: 'deferred',
      workers: 0,
      sweepIntervalMs: 0,
      handle: () => {},
    });
    const deliver = (id: string) =>
      inbox!.receive({ headers: { 'idempotency-key': id }, rawBody: Buffer.from('{}') });
    expect((await deliver('r-1')).kind).toBe('pending');
    expect(pool.opened).toBe(1);

    const before = pool.releases.length;
    proxy.resetNext();
    const reset = await deliver('r-2');
    expect(reset.status).toBe(503);
    // Handed back as broken, with the socket's error (by every checkout it was under): not as a
    // healthy connection that the next checkout gets and fails on (then as not queryable).
    const since = pool.releases.slice(before);
    expect(since.length).toBeGreaterThan(0);
    expect(since.map((err) => (err instanceof Error ? (err as { code?: string }).code : err))).toEqual(
      since.map(() => 'ECONNRESET'),
    );

    expect((await deliver('r-2')).kind).toBe('pending');
    expect(pool.opened).toBe(2);
    expect(await inbox.event('r-2')).toMatchObject({ status: 'pending' });
  });
});
