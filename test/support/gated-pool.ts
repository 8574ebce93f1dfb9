/**
 * Tools to force an interleaving against real Postgres, deterministically: a pg pool that
 * holds one chosen statement until the test lets it go, a gate a handler can wait at, and a
 * wait for a session to be blocked on a lock (seen in pg_stat_activity).
 */
import pg from 'pg';
import type { PgClientLike, PgPoolLike } from '../../src/index.js';
import { onePerClient } from './counting-pool.js';

/** A one-shot gate: `open()` lets every `passed()` waiter through; `reached` says someone is waiting. */
export class Gate {
  #open!: () => void;
  #reached!: () => void;
  readonly opened = new Promise<void>((resolve) => {
    this.#open = resolve;
  });
  /** Resolves when the first waiter arrives at the gate. */
  readonly reached = new Promise<void>((resolve) => {
    this.#reached = resolve;
  });
  /** Waits at the gate. */
  passed(): Promise<void> {
    this.#reached();
    return this.opened;
  }
  open(): void {
    this.#open();
  }
}

/**
 * A pg pool whose next statement matching a pattern waits at a gate before it is sent, or
 * whose answer waits at a gate after it has run (a slow way back from the server).
 */
export class GatedPool implements PgPoolLike {
  readonly pool: pg.Pool;
  readonly #holds: Array<{ pattern: RegExp; gate: Gate }> = [];
  readonly #answerHolds: Array<{ pattern: RegExp; gate: Gate }> = [];

  /** `options`: extra server settings for every connection (e.g. the default isolation). */
  constructor(connectionString: string, options?: string) {
    this.pool = new pg.Pool({ connectionString, max: 10, ...(options ? { options } : {}) });
    this.pool.on('error', () => {});
  }

  /** The next statement whose text matches `pattern` waits until the returned gate opens. */
  hold(pattern: RegExp): Gate {
    const gate = new Gate();
    this.#holds.push({ pattern, gate });
    return gate;
  }

  /**
   * The answer to the next statement whose text matches `pattern` waits until the returned gate
   * opens: the statement has run in Postgres (`reached` says its answer has arrived), and the
   * inbox has not heard back.
   */
  holdAnswer(pattern: RegExp): Gate {
    const gate = new Gate();
    this.#answerHolds.push({ pattern, gate });
    return gate;
  }

  readonly #wrapper = onePerClient((client) => this.#wrap(client));
  async connect(): Promise<PgClientLike> {
    return this.#wrapper(await this.pool.connect());
  }

  #wrap(client: pg.PoolClient): PgClientLike {
    const holds = this.#holds;
    const answerHolds = this.#answerHolds;
    return {
      async query(config) {
        const i = holds.findIndex((h) => h.pattern.test(config.text));
        if (i >= 0) {
          const [{ gate }] = holds.splice(i, 1);
          await gate.passed();
        }
        const j = answerHolds.findIndex((h) => h.pattern.test(config.text));
        if (j < 0) return client.query(config as pg.QueryConfig) as any;
        const [{ gate }] = answerHolds.splice(j, 1);
        const answer = await client.query(config as pg.QueryConfig).then(
          (result) => ({ result }),
          (error: unknown) => ({ error }),
        );
        await gate.passed();
        if ('error' in answer) throw answer.error;
        return answer.result as any;
      },
      release: (err) => client.release(err as any),
      on: (event, listener) => client.on(event, listener),
      off: (event, listener) => client.off(event, listener),
    };
  }

  end(): Promise<void> {
    return this.pool.end();
  }
}

/**
 * Resolves true once some session's current statement containing `text` (or any of the texts)
 * waits for a lock, or false if `unless` settles first (the statement finished without waiting).
 * Polls pg_stat_activity: a lock wait is not an event a client can subscribe to.
 */
export async function blockedOnLock(
  db: pg.Pool,
  text: string | readonly string[],
  unless?: Promise<unknown>,
  timeoutMs = 20_000,
): Promise<boolean> {
  let settled = false;
  unless?.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await db.query(
      `select 1 from pg_stat_activity
        where wait_event_type = 'Lock' and pid <> pg_backend_pid()
          and exists (select 1 from unnest($1::text[]) as t(text) where position(t.text in query) > 0)`,
      [typeof text === 'string' ? [text] : text],
    );
    if (rows.length > 0) return true;
    if (settled) return false;
    if (Date.now() > deadline) throw new Error(`no session running ${text} waited for a lock`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
