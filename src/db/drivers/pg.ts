/**
 * Our Kysely driver over a pg-shaped pool. Two things set it apart from a plain one:
 *
 * - Hot-path statements are named prepared statements (see `StatementNames`).
 * - Folding (src/db/drivers/fold.ts): BEGIN rides on the claim, the stored result on COMMIT, so
 *   that a new event costs the round trips of a bare transaction. On node-postgres's own
 *   clients a fold is a pipeline (src/db/drivers/extended-protocol.ts), its values bound as parameters; on a
 *   pg-shaped wrapper it is simple-protocol text, an `EXECUTE` of a statement PREPAREd once per
 *   connection.
 */

import type { CompiledQuery, DatabaseConnection, Driver, QueryResult, TransactionSettings } from 'kysely';
import pg from 'pg';
import { boundedWait, pipelinedTextName, type StatementEntry, type StatementNames } from './common.js';
import { forgetParsed, type PipelineResult, runPipeline } from './extended-protocol.js';
import { FoldingConnection, type PipelinePart } from './fold.js';
import { sqlState } from './postgres-error.js';
import type { FoldState } from './prepared-folds.js';
import { WIRE } from './session.js';
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
    folds: FoldState,
  ) {
    // The pool's client object outlives this connection: its prepared statements are remembered on it.
    super(names, client, folds);
    this.#acceptsArguments = client instanceof pg.Client;
    if (this.#acceptsArguments && !['prepared', 'literals', 'each', 'bare'].includes(WIRE))
      this.pipeline = this.#pipeline;
    client.on?.('error', this.onError);
    // A pool without a 'connect' event (a pg-shaped wrapper) hands out clients not yet quieted.
    quiet(client);
  }

  /** One statement on the extended protocol: parameters bound, named when registered. */
  protected send<R>(compiled: CompiledQuery, entry: StatementEntry | undefined): Promise<QueryResult<R>> {
    const values = compiled.parameters as unknown[];
    const name = WIRE === 'bare' ? undefined : entry?.name;
    return this.#query(
      name ? { name, text: compiled.sql, values } : { text: compiled.sql, values },
      firstResult<R>,
    );
  }

  readonly #pipeline = <R>(parts: ReadonlyArray<PipelinePart>): Promise<QueryResult<R>[]> => {
    const steps = parts.map((part) => ({
      name: part.name ?? pipelinedTextName(part.text),
      text: part.text,
      values: part.values,
    }));
    let sent: Promise<PipelineResult[]>;
    try {
      sent = runPipeline(this.client as unknown as pg.ClientBase, steps);
    } catch (err) {
      return Promise.reject(this.#failed(err));
    }
    return sent.then(
      (results) => results.map((result) => resultOf(result as PgResult<R>)),
      (err) => {
        // A statement of ours is gone (DISCARD ALL, a pooler that swapped backends): this
        // session's pipelines parse every statement anew from now on.
        if (sqlState(err) === '26000') forgetParsed(this.client);
        throw this.#failed(err);
      },
    );
  };

  protected simpleAll<R>(text: string): Promise<QueryResult<R>[]> {
    return this.#query({ text }, allResults<R>);
  }

  /**
   * node-postgres copies a query given as an object, property descriptor by descriptor, before
   * it sends it, four statements per new event; text and values given as arguments are not
   * copied. Only a named statement needs the object. A
   * pg-shaped client that is not node-postgres's own (a wrapper, a proxy) gets the object, the
   * shape `PgClientLike` promises.
   */
  readonly #acceptsArguments: boolean;

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
      sent =
        config.name === undefined && this.#acceptsArguments
          ? (this.client as unknown as pg.ClientBase).query(config.text, config.values)
          : this.client.query(config);
    } catch (err) {
      return Promise.reject(this.#failed(err));
    }
    return sent.then(read, (err) => {
      throw this.#failed(err);
    });
  }

  /**
   * A Postgres error (it has a SQLSTATE `code`) leaves the connection healthy; anything else
   * (socket closed, backend terminated) means the pool must not hand it out again.
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
  readonly #folds: FoldState = { textOnly: false };
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
