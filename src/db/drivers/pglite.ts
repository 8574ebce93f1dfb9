import type { CompiledQuery, DatabaseConnection, Driver, QueryResult, TransactionSettings } from 'kysely';
import { boundedWait, type StatementNames } from './common.js';
import { FoldingConnection } from './fold.js';
import { type SessionTurns, sessionOf } from './session.js';
import type { PGliteLike } from './shapes.js';

/**
 * PGlite is one Postgres session. Two interleaved Kysely transactions on it are really one
 * transaction, so a ROLLBACK of one undoes the other's work (measured: 16 of 32 rows
 * survived). This driver hands its single connection out exclusively: transactions and
 * statements queue behind each other, which is what one session can honestly offer.
 */
/**
 * The one session's connection. It folds like the pg driver's (src/db/drivers/fold.ts): here a
 * fold saves calls into the embedded database rather than network round trips, and each call
 * has a fixed cost of its own (the protocol written and read in JavaScript, the step into
 * WebAssembly) that is more than most of our statements' own work. Folded statements are
 * PREPAREd on the one session before its first fold and EXECUTEd, as on pg: the parse and
 * plan of their text, in WebAssembly, is not paid per delivery.
 */
class PGliteConnection extends FoldingConnection {
  constructor(
    readonly pglite: PGliteLike,
    names: StatementNames,
  ) {
    // The one session lives as long as the PGlite instance: its prepared statements too.
    super(names, pglite, { literals: false });
  }

  protected async simpleAll<R>(text: string): Promise<QueryResult<R>[]> {
    return (await this.pglite.exec(text)).map((result) => toResult<R>(result));
  }

  protected async send<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
    // Without parameters, the simple protocol: several statements may run at once
    // (migrations), and BEGIN/COMMIT skip a parse.
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
    // The one session is busy: wait (bounded) for our turn. Given up, the turn is passed on
    // untouched when it comes.
    await boundedWait(previous, this.waitTimeoutMs, () => release());
    // Ours now: nobody can take the session meanwhile, so waiting for the next pass keeps the order.
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
