import type { CompiledQuery, DatabaseConnection, Driver, QueryResult, TransactionSettings } from 'kysely';
import { boundedWait, type StatementNames } from './common.js';
import { FoldingConnection } from './fold.js';
import { type SessionTurns, sessionOf } from './session.js';
import type { PGliteLike } from './shapes.js';

/** PGlite is one session, so its one connection is handed out exclusively; it folds as pg's does. */
class PGliteConnection extends FoldingConnection {
  constructor(
    readonly pglite: PGliteLike,
    names: StatementNames,
  ) {
    super(names, pglite, { literals: false });
  }

  protected async simpleAll<R>(text: string): Promise<QueryResult<R>[]> {
    return (await this.pglite.exec(text)).map((result) => toResult<R>(result));
  }

  protected async send<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
    // Without parameters, the simple protocol: several statements may run at once (migrations).
    if (compiled.parameters.length === 0) return this.simple<R>(compiled.sql);
    return toResult<R>(await this.pglite.query<R>(compiled.sql, compiled.parameters as unknown[]));
  }
}

function toResult<R>(result: { rows: unknown[]; affectedRows?: number } | undefined): QueryResult<R> {
  if (!result) return { rows: [] };
  return {
    rows: result.rows as R[],
    numAffectedRows: result.affectedRows === undefined ? undefined : BigInt(result.affectedRows),
  };
}

export class PGliteDriver implements Driver {
  readonly #connection: PGliteConnection;
  readonly #turns: SessionTurns;

  constructor(
    readonly pglite: PGliteLike,
    readonly ownsDatabase: boolean,
    readonly waitTimeoutMs: number,
    readonly names: StatementNames,
  ) {
    this.#turns = sessionOf(pglite).turns;
    this.#connection = new PGliteConnection(pglite, names);
  }
  async init(): Promise<void> {}
  async acquireConnection(): Promise<DatabaseConnection> {
    const turns = this.#turns;
    const previous = turns.tail;
    let release!: () => void;
    turns.tail = new Promise<void>((resolve) => {
      release = resolve;
    });
    // Wait (bounded) for our turn; given up, the turn is passed on when it comes.
    await boundedWait(previous, this.waitTimeoutMs, () => release());
    await turns.ownPass();
    turns.release = release;
    return this.#connection;
  }
  async beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    (connection as PGliteConnection).begin(settings);
  }
  commitTransaction(connection: DatabaseConnection): Promise<void> {
    return (connection as PGliteConnection).commit();
  }
  rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    return (connection as PGliteConnection).rollback();
  }
  async releaseConnection(): Promise<void> {
    const release = this.#turns.release;
    this.#turns.release = undefined;
    release?.();
  }
  async destroy(): Promise<void> {
    await this.#turns.tail;
    if (this.ownsDatabase && !this.pglite.closed) await this.pglite.close();
  }
}
