import {
  CompiledQuery,
  type DatabaseConnection,
  type Driver,
  type QueryResult,
  type TransactionSettings,
} from 'kysely';
import { beginStatement, boundedWait, type StatementNames } from './common.js';
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

export class PGliteDriver implements Driver {
  readonly #connection: DatabaseConnection;
  readonly #turns: SessionTurns;

  constructor(
    readonly pglite: PGliteLike,
    readonly ownsDatabase: boolean,
    readonly waitTimeoutMs: number,
    readonly names: StatementNames,
  ) {
    this.#turns = turnsOf(pglite);
    this.#connection = {
      executeQuery: async <R>(compiled: CompiledQuery): Promise<QueryResult<R>> => {
        // Without parameters, the simple protocol: several statements may run at once
        // (migrations), and BEGIN/COMMIT skip a parse.
        const result =
          compiled.parameters.length === 0
            ? ((await pglite.exec(compiled.sql)).at(-1) ?? { rows: [] })
            : await pglite.query<R>(compiled.sql, compiled.parameters as unknown[]);
        // A statement that names one to follow it (the SAVEPOINT after a take): no round trips
        // to save here, one session in this process.
        const then = names.get(compiled.sql)?.then;
        if (then) await pglite.exec(then);
        return {
          rows: result.rows,
          numAffectedRows: result.affectedRows === undefined ? undefined : BigInt(result.affectedRows),
        };
      },
      // biome-ignore lint/correctness/useYield: streaming is not supported on this driver.
      async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
        throw new Error('webhook-inbox: streaming queries are not supported');
      },
    };
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
    turns.release = release;
    return this.#connection;
  }
  beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    return run(connection, beginStatement(settings));
  }
  commitTransaction(connection: DatabaseConnection): Promise<void> {
    return run(connection, 'commit');
  }
  rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    return run(connection, 'rollback');
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

async function run(connection: DatabaseConnection, text: string): Promise<void> {
  await connection.executeQuery(CompiledQuery.raw(text));
}
