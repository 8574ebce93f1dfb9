/**
 * Our Kysely driver over a pg-shaped pool (node-postgres's, or anything shaped like it). Two
 * things set it apart from a plain one:
 *
 * - A registered statement sent alone is named (its `name:`, src/db/drivers/common.ts):
 *   PostgreSQL parses and plans it once per connection instead of once per delivery.
 * - Folding (src/db/drivers/fold.ts): BEGIN rides on the claim, the stored result on COMMIT, so
 *   that a new event costs the round trips of a bare transaction: simple-protocol text, an
 *   `execute` of statements PREPAREd once per connection (src/db/drivers/prepared-folds.ts).
 *
 * A pool whose sessions lose what is prepared on them (src/db/drivers/prepared-folds.ts) folds
 * literals and names nothing from then on.
 */

import type { CompiledQuery, DatabaseConnection, Driver, QueryResult, TransactionSettings } from 'kysely';
import { boundedWait, type StatementEntry, type StatementNames } from './common.js';
import { FoldingConnection } from './fold.js';
import { sqlState } from './postgres-error.js';
import { lostStatements, type PoolFolds } from './prepared-folds.js';
import type { PgClientLike, PgPoolLike } from './shapes.js';

const MUTATING = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);
/** Clients that carry a permanent no-op 'error' listener (see `quiet`), and pools that give one to each new client. */
const quieted = new WeakSet<object>();
const ignore = () => {};

/**
 * Gives a client a no-op 'error' listener, once, for good. A checked-out client of pg's pool
 * has no listener of the pool's, and an unheard 'error' event ends the process: a client
 * released as broken is ended without one, and a server shutting down (57P01) can still report
 * on it while it ends (the chaos suite's PostgreSQL restarts). A new client is quieted as the
 * pool hands it out (its 'connect' event): a shutdown whose FATAL arrived in the same packet as
 * the connection's ReadyForQuery was reported on it before any connection of ours held it, and
 * ended the process (seen once in the chaos suite; test/pool-clients-survive-a-shutdown.test.ts).
 */
function quiet(client: PgClientLike): void {
  if (quieted.has(client)) return;
  quieted.add(client);
  client.on?.('error', ignore);
}

class PgConnection extends FoldingConnection {
  /** Set when a query failed in a way that may have left the connection unusable. */
  broken: Error | undefined;
  /**
   * A checked-out client whose backend dies between two queries (pg_terminate_backend, a
   * server restart, idle-in-transaction timeout) emits 'error' on itself, not on the pool, and
   * an unhandled 'error' event ends the process: found by the chaos suite (bench/chaos.ts),
   * which terminated a backend while a handler awaited something else inside its transaction.
   * The next query fails anyway; this only marks the connection so that the pool drops it.
   */
  readonly onError = (err: Error) => {
    this.broken = err;
  };
  constructor(
    readonly client: PgClientLike,
    names: StatementNames,
    folds: PoolFolds,
  ) {
    // The pool's client object outlives this connection: its prepared statements are remembered on it.
    super(names, client, folds);
    client.on?.('error', this.onError);
    // A pool without a 'connect' event (a pg-shaped wrapper) hands out clients not yet quieted.
    quiet(client);
  }

  /**
   * One statement on the extended protocol, its parameters bound: named when it is registered
   * and never folds (what folds is PREPAREd under its name), while the pool keeps what is
   * prepared on its sessions.
   */
  protected send<R>(compiled: CompiledQuery, entry: StatementEntry | undefined): Promise<QueryResult<R>> {
    const values = compiled.parameters as unknown[];
    const named = entry !== undefined && entry.rides === 'none' && !this.folds.literals;
    if (!named) return this.#query({ text: compiled.sql, values }, firstResult<R>);
    return this.#query({ name: entry.name, text: compiled.sql, values }, firstResult<R>).then(
      undefined,
      (err) => {
        // Its name gone (26000) or taken by another's (42P05): the pool's sessions do not keep ours.
        lostStatements(this.folds, err);
        throw err;
      },
    );
  }

  protected simpleAll<R>(text: string): Promise<QueryResult<R>[]> {
    return this.#query({ text }, allResults<R>);
  }

  /**
   * Sends one query and reads its answer with `read`. A chain of `then`, not an async
   * function: every statement of a delivery goes through here, and each async layer costs a
   * promise and a turn of the microtask queue (the first things a CPU profile of a new event
   * showed above handmade's, with GC).
   */
  #query<T>(
    config: { text: string; values?: unknown[]; name?: string },
    read: (answer: unknown) => T,
  ): Promise<T> {
    let sent: Promise<unknown>;
    try {
      sent = this.client.query(config);
    } catch (err) {
      return Promise.reject(this.#failed(err));
    }
    return sent.then(read, (err) => {
      throw this.#failed(err);
    });
  }

  /**
   * A Postgres error (it has a SQLSTATE `code`) leaves the connection healthy; anything else
   * (socket closed or reset, client no longer queryable) means the pool must not hand it out
   * again.
   */
  #failed(err: unknown): unknown {
    if (sqlState(err) === undefined) this.broken = err as Error;
    return err;
  }
}

function resultOf<R>(result: PgResult<R>): QueryResult<R> {
  return {
    rows: result.rows ?? [],
    numAffectedRows:
      result.command && MUTATING.has(result.command) ? BigInt(result.rowCount ?? 0) : undefined,
  };
}

/** The answer to one statement (several statements on the simple protocol answer one result each). */
function firstResult<R>(answer: unknown): QueryResult<R> {
  return resultOf((Array.isArray(answer) ? answer[0] : answer) as PgResult<R>);
}

function allResults<R>(answer: unknown): QueryResult<R>[] {
  return (Array.isArray(answer) ? answer : [answer]).map((result: PgResult<R>) => resultOf(result));
}

/** What node-postgres answers for one statement. */
interface PgResult<R> {
  rows?: R[];
  rowCount: number | null;
  command?: string;
}

export class PgPoolDriver implements Driver {
  readonly #folds: PoolFolds = { literals: false };
  constructor(
    readonly pool: PgPoolLike,
    readonly names: StatementNames,
    readonly ownsPool: boolean,
    readonly waitTimeoutMs: number,
  ) {
    // Once per pool: many inboxes may share one (a listener each would pass Node's warning at 10).
    if (!quieted.has(pool)) {
      quieted.add(pool);
      pool.on?.('connect', quiet);
    }
  }
  async init(): Promise<void> {}
  async acquireConnection(): Promise<DatabaseConnection> {
    const client = await boundedWait(this.pool.connect(), this.waitTimeoutMs, (late) => late.release());
    return new PgConnection(client, this.names, this.#folds);
  }
  async beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    (connection as PgConnection).begin(settings);
  }
  commitTransaction(connection: DatabaseConnection): Promise<void> {
    return (connection as PgConnection).commit();
  }
  rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    return (connection as PgConnection).rollback();
  }
  async releaseConnection(connection: DatabaseConnection): Promise<void> {
    const c = connection as PgConnection;
    c.client.off?.('error', c.onError);
    c.client.release(c.broken ?? false);
  }
  async destroy(): Promise<void> {
    if (this.ownsPool) await this.pool.end?.();
  }
}
