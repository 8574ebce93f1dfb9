/**
 * A failed run is recorded in its own transaction, while the event is still locked: the
 * handler's writes are rolled back to a savepoint, and `fail` rides on the COMMIT. Before, a
 * ROLLBACK released the event and a separate statement counted the attempt; in between,
 * another worker took the event, ran the handler again at once, and its success made the
 * failure uncounted (seen as a flaky "attempts 0" in the deferred conformance run).
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createInbox, type PgClientLike, type PgPoolLike } from '../src/index.js';
import { CountingPool } from './support/counting-pool.js';
import { postgresTarget, postgresUrl } from './support/databases.js';

/** A pool whose client holds back the first query matching `pattern` until `release()`. */
class GatedPool implements PgPoolLike {
  readonly pool = new pg.Pool({ connectionString: postgresUrl!, max: 4 });
  #pattern: RegExp | undefined;
  #release: (() => void) | undefined;
  #reached: (() => void) | undefined;
  constructor() {
    this.pool.on('error', () => {});
  }
  /** Holds the next query whose text matches; resolves when one is held. */
  gate(pattern: RegExp): Promise<void> {
    this.#pattern = pattern;
    return new Promise((resolve) => {
      this.#reached = resolve;
    });
  }
  release(): void {
    this.#release?.();
  }
  async connect(): Promise<PgClientLike> {
    const client = await this.pool.connect();
    return {
      query: async (config) => {
        if (this.#pattern?.test(config.text)) {
          this.#pattern = undefined;
          await new Promise<void>((resolve) => {
            this.#release = resolve;
            this.#reached?.();
          });
        }
        return client.query(config as pg.QueryConfig) as any;
      },
      release: (err) => client.release(err as any),
    };
  }
  end(): Promise<void> {
    return this.pool.end();
  }
}

describe.runIf(postgresTarget)('failed runs keep their event locked (real Postgres)', () => {
  it('another worker cannot take an event while its failed run is being recorded', async () => {
    const t = await postgresTarget!.open();
    const gated = new GatedPool();
    const other = new CountingPool(postgresUrl!);
    let runs = 0;
    const options = {
      schema: t.schema,
      mode: 'deferred' as const,
      workers: 0, // the sweeper applies pending events: each step is in the test's hands
      sweepIntervalMs: 0,
      retryBaseMs: 1,
      retryCapMs: 1, // the retry is due at once: nothing but the lock keeps the other worker off
      handle: () => {
        runs++;
        if (runs === 1) throw new Error('first run fails');
        return { ok: true };
      },
    };
    const a = createInbox({ ...options, db: gated });
    const b = createInbox({ ...options, db: other });
    try {
      await Promise.all([a.ready(), b.ready()]);
      const outcome = await a.receive({
        headers: { 'idempotency-key': 'locked-1', 'content-type': 'application/json' },
        rawBody: Buffer.from('{}'),
      });
      expect(outcome.kind).toBe('pending');
      // A's run fails; the statement that records it (with its COMMIT) is held back.
      const held = gated.gate(/^rollback to savepoint wi_apply;[\s\S]*fail"\(/);
      const first = a.sweep();
      await held;
      expect(runs).toBe(1);
      // Meanwhile B looks for due pending events: the failed one is still locked by A.
      expect((await b.sweep()).applied).toBe(0);
      expect(runs).toBe(1);
      gated.release();
      // A's pass goes on: the failure is committed (one attempt), the retry is due at once,
      // and A's next take applies it.
      expect((await first).applied).toBe(1);
      expect(runs).toBe(2);
      expect(await a.event('locked-1')).toMatchObject({ status: 'processed', attempts: 1 });
    } finally {
      await Promise.all([a.close(), b.close()]);
      await Promise.all([gated.end(), other.end()]);
      await t.close();
    }
  });
});
