/** Our Kysely driver over a pg pool: statements sent alone are named (planned once), transactions fold. */
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

/** A permanent no-op 'error' listener: an unheard one (a 57P01 on a checked-out client) ends the process. */
function quiet(client: PgClientLike): void {
  if (quieted.has(client)) return;
  quieted.add(client);
  client.on?.('error', ignore);
}

class PgConnection extends FoldingConnection {
  /** Set when a query failed in a way that may have left the connection unusable. */
  broken: Error | undefined;
  /** A backend that dies between two queries is reported on the client: the pool must drop it. */
  readonly onError = (err: Error) => {
    this.broken = err;
  };
  constructor(
    readonly client: PgClientLike,
    names: StatementNames,
    folds: PoolFolds,
  ) {
    super(names, client, folds);
    client.on?.('error', this.onError);
    // A pool without a 'connect' event (a pg-shaped wrapper) hands out clients not yet quieted.
    quiet(client);
  }

  /** Named when registered and never folded (what folds is PREPAREd under its name). */
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

  /** A chain of `then`, not an async function: every statement goes through here. */
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

  /** A Postgres error (with a SQLSTATE) leaves the connection healthy; anything else breaks it. */
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

function firstResult<R>(answer: unknown): QueryResult<R> {
  return resultOf((Array.isArray(answer) ? answer[0] : answer) as PgResult<R>);
}

function allResults<R>(answer: unknown): QueryResult<R>[] {
  return (Array.isArray(answer) ? answer : [answer]).map((result: PgResult<R>) => resultOf(result));
}

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
