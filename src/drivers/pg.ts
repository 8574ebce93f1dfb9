/**
 * Our Kysely driver over a pg-shaped pool. Two things set it apart from a plain one:
 *
 * - Hot-path statements are named prepared statements (see `StatementNames`).
 * - Folding (src/drivers/fold.ts): BEGIN rides on the claim, the stored result on COMMIT, so
 *   that a new event costs the round trips of a bare transaction. Here a folded statement is
 *   an `EXECUTE` of a statement PREPAREd once per connection (below).
 */

import type { CompiledQuery, DatabaseConnection, Driver, QueryResult, TransactionSettings } from 'kysely';
import { boundedWait, type StatementEntry, type StatementNames } from './common.js';
import { FoldingConnection, inline, literalsOf } from './fold.js';
import type { PgClientLike, PgPoolLike } from './shapes.js';

const MUTATING = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);
/** Clients that carry a permanent no-op 'error' listener (see PgConnection). */
const quieted = new WeakSet<object>();
const ignore = () => {};

/**
 * Which folding statements are PREPAREd on a connection (keyed by the pool's client object,
 * which outlives our PgConnection), or 'inline' when folds on it carry the statement's text.
 *
 * A folded statement travels on the simple protocol, where Postgres parses, analyses and plans
 * its text every time; `execute <prepared>(literals)` skips all of that (bench/postgres-cost.ts
 * measures the difference). The statements are prepared in one round trip before the
 * connection's first fold: once per connection, never per delivery. A connection whose
 * PREPARE failed, or whose statements were deallocated behind our back (DISCARD ALL; a pooler
 * that swaps backends), folds text from then on: slower, never wrong. A pool that hands out a
 * new client object for the same connection costs one failed PREPARE per object.
 */
const preparedOn = new WeakMap<object, Set<string> | 'inline'>();
const UNDEFINED_PREPARED_STATEMENT = '26000';
const DUPLICATE_PREPARED_STATEMENT = '42P05';

/**
 * Per pool: set when a PREPARE found its statement already there, i.e. the pool hands out a
 * new client object for a connection it handed out before (a wrapping pool). Such a pool's
 * connections cannot be told apart, so all of them fold text, and none pays a PREPARE again.
 */
interface FoldState {
  textOnly: boolean;
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
    readonly folds: FoldState = { textOnly: false },
  ) {
    super(names);
    client.on?.('error', this.onError);
    // Once per client, for good: a client released as broken is ended by the pool without its
    // idle listener, and a server shutting down (57P01) can still report on it while it ends.
    // Unheard, that 'error' ended the process (the chaos suite's PostgreSQL restarts).
    if (!quieted.has(client)) {
      quieted.add(client);
      client.on?.('error', ignore);
    }
  }

  /**
   * BEGIN (or SET TRANSACTION) and an `after-begin` statement (and `then`) in one round trip.
   * Undefined when the values cannot be folded (the caller sends BEGIN alone, then the statement).
   */
  protected override async foldOnBegin<R>(
    begin: string,
    compiled: CompiledQuery,
    entry: StatementEntry,
    then: string | undefined,
  ): Promise<QueryResult<R> | undefined> {
    const prepared = preparedOn.get(this.client);
    if (entry.prepared && !this.folds.textOnly && prepared !== 'inline' && !prepared?.has(entry.prepared))
      await this.#prepareFolds();
    const send = () => super.foldOnBegin<R>(begin, compiled, entry, then);
    try {
      return await send();
    } catch (err) {
      // Its prepared statement was deallocated behind our back (DISCARD ALL, a pooler that
      // swapped backends). Nothing but BEGIN ran in this transaction: roll it back (a statement
      // alone had its implicit one rolled back already) and send the same as text (the
      // connection folds text from now on), rather than fail a delivery.
      if ((err as { code?: string }).code !== UNDEFINED_PREPARED_STATEMENT || this.broken) throw err;
      if (this.inTransaction) await this.simple('rollback');
      return send();
    }
  }

  /**
   * PREPAREs the folding statements this connection lacks (one pool may serve inboxes in
   * several schemas): one round trip, once per connection and schema, before a fold's BEGIN,
   * so that a failure aborts nothing. A failure (a statement of that name already there: a
   * pool that wraps one connection in several client objects) leaves it folding text.
   */
  async #prepareFolds(): Promise<void> {
    const prepared = preparedOn.get(this.client);
    const have = prepared instanceof Set ? prepared : new Set<string>();
    const missing = [...this.names.preparable()].filter(([, e]) => !have.has(e.prepared));
    try {
      await this.simple(missing.map(([text, e]) => `prepare ${e.prepared} as ${text}`).join('; '));
      for (const [, e] of missing) have.add(e.prepared);
      preparedOn.set(this.client, have);
    } catch (err) {
      if (this.broken) throw err;
      preparedOn.set(this.client, 'inline');
      if ((err as { code?: string }).code === DUPLICATE_PREPARED_STATEMENT) this.folds.textOnly = true;
    }
  }

  /**
   * A registered statement as folded text: `execute <prepared>(literals)` on a connection where
   * it is prepared, else its text with the literals in.
   */
  protected override foldText(
    compiled: CompiledQuery,
    entry: StatementEntry | undefined,
  ): string | undefined {
    const literals = literalsOf(compiled);
    if (literals === undefined) return undefined;
    const prepared = preparedOn.get(this.client);
    if (entry?.prepared && !this.folds.textOnly && prepared instanceof Set && prepared.has(entry.prepared)) {
      return literals.length
        ? `execute ${entry.prepared}(${literals.join(', ')})`
        : `execute ${entry.prepared}`;
    }
    return inline(compiled.sql, literals);
  }

  /** One statement on the extended protocol: parameters bound, named when registered. */
  protected async send<R>(
    compiled: CompiledQuery,
    entry: StatementEntry | undefined,
  ): Promise<QueryResult<R>> {
    const values = compiled.parameters as unknown[];
    const name = entry?.name;
    const [result] = await this.#query<R>(
      name ? { name, text: compiled.sql, values } : { text: compiled.sql, values },
    );
    return result as QueryResult<R>;
  }

  protected simpleAll<R>(text: string): Promise<QueryResult<R>[]> {
    return this.#query<R>({ text });
  }

  async #query<R>(config: { text: string; values?: unknown[]; name?: string }): Promise<QueryResult<R>[]> {
    try {
      const answer: unknown = await this.client.query(config);
      // Several statements on the simple protocol answer one result each.
      return (Array.isArray(answer) ? answer : [answer]).map((result: PgResult<R>) => ({
        rows: result.rows ?? [],
        numAffectedRows:
          result.command && MUTATING.has(result.command) ? BigInt(result.rowCount ?? 0) : undefined,
      }));
    } catch (err) {
      // A Postgres error (it has a SQLSTATE `code`) leaves the connection healthy; anything
      // else (socket closed, backend terminated) means the pool must not hand it out again.
      if (!(err && typeof err === 'object' && 'code' in err && typeof err.code === 'string')) {
        this.broken = err as Error;
      } else if (err.code === UNDEFINED_PREPARED_STATEMENT) {
        // Deallocated behind our back (DISCARD ALL, a pooler): fold text on this connection.
        preparedOn.set(this.client, 'inline');
      }
      throw err;
    }
  }
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
  ) {}
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
