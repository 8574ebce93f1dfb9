import type { CompiledQuery, DatabaseConnection, Driver, QueryResult, TransactionSettings } from 'kysely';
import { boundedWait, type StatementNames } from './common.js';
import { FoldingConnection } from './fold.js';
import type { PGliteLike } from './shapes.js';

/**
 * PGlite is one Postgres session. Two interleaved Kysely transactions on it are really one
 * transaction, so a ROLLBACK of one undoes the other's work (measured: 16 of 32 rows
 * survived). This driver hands its single connection out exclusively: transactions and
 * statements queue behind each other, which is what one session can honestly offer.
 */
/**
 * The turns of one PGlite session. Kept per PGlite instance, not per driver: two inboxes (or an
 * inbox and the app's own Kysely built with `inbox.kysely()`) sharing one PGlite share its one
 * session, so they must queue in one line.
 */
class SessionTurns {
  tail: Promise<void> = Promise.resolve();
  release: (() => void) | undefined;
  /** A turn began in this pass of the event loop; cleared by the next check phase. */
  #passTaken = false;

  /**
   * Waits, if need be, for a pass of the event loop in which the session has not run yet: at
   * most one turn per pass. Called by the turn's holder, so the order of turns stays the chain's.
   *
   * Why: PGlite's calls resolve without waiting for I/O, so a chain of turns, or one socket's
   * request after another's in the same poll phase, ran back to back in microtasks and the event
   * loop did not come round until the whole queue was through. Under saturation one pass lasted
   * about as long as p50 (every waiting delivery's transaction), and Node (libuv 1.45 and later)
   * accepts one new connection per pass: of 50 connections opened at once, the last waited about
   * 50 passes to be accepted, seconds. In the benchmark nearly every delivery slower than p99 (on
   * inbox-pglite and bare-pglite alike) was a connection's first request; the others kept p99
   * near 2× p50. One turn per pass bounds a pass to one transaction: sockets are read and a
   * connection accepted between any two turns. The cost: a setImmediate per turn while turns
   * follow each other, nothing for a turn on an idle session.
   */
  async ownPass(): Promise<void> {
    if (this.#passTaken) await new Promise<void>((resolve) => setImmediate(resolve));
    this.#passTaken = true;
    setImmediate(() => {
      this.#passTaken = false;
    });
  }
}
const sessionTurns = new WeakMap<object, SessionTurns>();
function turnsOf(pglite: PGliteLike): SessionTurns {
  let turns = sessionTurns.get(pglite);
  if (!turns) {
    turns = new SessionTurns();
    sessionTurns.set(pglite, turns);
  }
  return turns;
}

/**
 * The one session's connection. It folds like the pg driver's (src/drivers/fold.ts): here a
 * fold saves calls into the embedded database rather than network round trips, and each call
 * has a fixed cost of its own (the protocol written and read in JavaScript, the step into
 * WebAssembly) that measured more than most of our statements' own work. Folded statements are
 * PREPAREd on the one session before its first fold and EXECUTEd, as on pg: the parse and
 * plan of their text, in WebAssembly, is not paid per delivery.
 */
class PGliteConnection extends FoldingConnection {
  constructor(
    readonly pglite: PGliteLike,
    names: StatementNames,
  ) {
    // The one session lives as long as the PGlite instance: its prepared statements too.
    super(names, pglite);
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
    this.#turns = turnsOf(pglite);
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
