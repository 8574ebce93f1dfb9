/**
 * Folding, shared by our two drivers (src/db/drivers/pg.ts, src/db/drivers/pglite.ts): BEGIN is not
 * sent on its own. It waits for the transaction's first statement and, when that is one
 * that rides on `begin` (the claim, the take statements), both go in one round trip, as one
 * simple-protocol query of text (`begin; execute "<name>"('…', …)`). A statement that rides on
 * `commit` (the stored result) is held back and sent with COMMIT. A new event then costs what a
 * bare transaction costs: BEGIN+claim, the handler's statements, result+COMMIT. A statement may
 * name one to send right after it (`after`: the SAVEPOINT after a take). Held-back statements
 * ride likewise on the next registered statement, when one comes before COMMIT (a batch of
 * events: the next event's SAVEPOINT carries the last result).
 *
 * What a fold saves differs by driver: a network round trip on pg; on PGlite, a call into the
 * embedded database, whose fixed cost (the protocol written and read in JavaScript, the step
 * into WebAssembly) is more than most of our statements' own work.
 *
 * The simple protocol takes no parameters, so the values are written as literals
 * (src/db/drivers/literals.ts), as the arguments of statements PREPAREd on the session
 * (src/db/drivers/prepared-folds.ts). A value that cannot be written makes its statement
 * travel alone with its values bound, BEGIN sent first. A transaction that sends nothing sends
 * neither BEGIN nor COMMIT.
 *
 * A statement that rides on `begin`, sent outside a transaction is a transaction of its own (deferred
 * mode's claim): `SET TRANSACTION` rides on it, and PostgreSQL runs the two as one implicit
 * transaction that commits before the answer leaves the server.
 */
import type { CompiledQuery, DatabaseConnection, QueryResult, TransactionSettings } from 'kysely';
import { beginStatement, type StatementEntry, type StatementNames, type StatementResult } from './common.js';
import { sqlState } from './postgres-error.js';
import {
  foldText,
  lostStatements,
  type PoolFolds,
  prepareFolds,
  UNDEFINED_PREPARED_STATEMENT,
} from './prepared-folds.js';
import { type Session, sessionOf } from './session.js';

/**
 * The isolation of every transaction the inbox opens (ARCHITECTURE.md, "READ COMMITTED,
 * always"), for a statement that is its own transaction: first in its query, it sets the
 * implicit transaction's, whatever the server's `default_transaction_isolation`.
 */
const ALONE_READ_COMMITTED = 'set transaction isolation level read committed';

/**
 * A part of a fold: a registered statement with its parameters, or text without parameters
 * (BEGIN, SAVEPOINT, COMMIT).
 */
type Part = string | { compiled: CompiledQuery; entry: StatementEntry | undefined };

/**
 * A connection that folds. A driver gives it the two ways it has of sending: `simpleAll` (text
 * on the simple protocol, several statements, the result of each) and `send` (one statement
 * with its parameters), and the object its session lives on (`session`), where the folded
 * statements are PREPAREd once and then EXECUTEd.
 */
export abstract class FoldingConnection implements DatabaseConnection {
  /** A BEGIN not sent yet: it rides on the transaction's first statement. */
  #begin: string | undefined;
  /** In a transaction (sent or not): `before-commit` statements wait for COMMIT. */
  #inTransaction = false;
  /** Statements held back to ride on COMMIT, in order. */
  #tails: CompiledQuery[] = [];

  constructor(
    readonly names: StatementNames,
    /** The object the session lives on (it outlives this object): pg's pooled client, the PGlite instance. */
    handle: object,
    /** What the pool learnt of its sessions (src/db/drivers/prepared-folds.ts): shared by its connections. */
    readonly folds: PoolFolds,
  ) {
    this.session = sessionOf(handle);
  }

  /** Where this connection's session keeps what outlives it (src/db/drivers/session.ts). */
  protected readonly session: Session;

  /** Whether a transaction was begun (sent or not). */
  protected get inTransaction(): boolean {
    return this.#inTransaction;
  }

  /** Text on the simple protocol (no values): several statements; the result of each, in order. */
  protected abstract simpleAll<R>(text: string): Promise<QueryResult<R>[]>;

  /** Text on the simple protocol: the result of its `fromEnd`th last statement. */
  protected async simple<R>(text: string, fromEnd = 1): Promise<QueryResult<R>> {
    return (await this.simpleAll<R>(text)).at(-fromEnd) ?? { rows: [] };
  }
  /** One statement with its parameters bound. */
  protected abstract send<R>(
    compiled: CompiledQuery,
    entry: StatementEntry | undefined,
  ): Promise<QueryResult<R>>;

  /**
   * Folded text on the simple protocol. When a prepared statement in it is gone (deallocated
   * behind our back: DISCARD ALL, a pooler that swapped backends), the pool folds literals from
   * now on.
   */
  #simpleFolded<R>(text: string): Promise<QueryResult<R>[]> {
    return this.simpleAll<R>(text).then(undefined, (err) => {
      lostStatements(this.folds, err);
      throw err;
    });
  }

  /**
   * BEGIN (or, for a statement alone, SET TRANSACTION) and an `after-begin` statement (and
   * `after`) in one query. Undefined when the values cannot be folded (the caller sends BEGIN
   * alone, then the statement).
   */
  async #foldOnBegin<R>(
    begin: string,
    compiled: CompiledQuery,
    entry: StatementEntry,
    then: string | undefined,
  ): Promise<QueryResult<R> | undefined> {
    if (entry.prepared && !this.folds.literals && !this.session.prepared?.has(entry.name))
      await prepareFolds(this.session, this.names, this.folds, (text) => this.simple(text));
    try {
      return await this.#fold<R>([begin], compiled, entry, then);
    } catch (err) {
      // Its prepared statement was deallocated behind our back. Nothing but BEGIN ran in this
      // transaction: roll it back (a statement alone had its implicit one rolled back already)
      // and send the same with its literals, rather than fail a delivery.
      if (sqlState(err) !== UNDEFINED_PREPARED_STATEMENT) throw err;
      if (this.inTransaction) await this.simple('rollback');
      return await this.#fold<R>([begin], compiled, entry, then);
    }
  }

  /**
   * What goes before (BEGIN, held-back statements), a registered statement's `first`, the
   * statement and `after`, as one simple query: the statement's rows, with its `first`'s row
   * joined into each. Undefined when a value cannot be folded (the caller sends each).
   */
  #fold<R>(
    before: readonly Part[],
    compiled: CompiledQuery,
    entry: StatementEntry,
    then: string | undefined,
  ): Promise<QueryResult<R>> | undefined {
    const parts: Part[] = [...before];
    if (entry.first !== undefined)
      parts.push({ compiled: { ...compiled, sql: entry.first }, entry: this.names.get(entry.first) });
    parts.push({ compiled, entry });
    if (then) parts.push(then);
    return this.#sendParts<R>(parts)?.then((results) => {
      const at = results.length - (then ? 2 : 1);
      const result = results[at] ?? { rows: [] };
      return entry.first === undefined ? result : withFirst(results[at - 1], result);
    });
  }

  /** Parts as one simple query of folded text. Undefined when a value cannot be written (the caller sends each). */
  #sendParts<R>(parts: readonly Part[]): Promise<QueryResult<R>[]> | undefined {
    const texts: string[] = [];
    for (const part of parts) {
      const text =
        typeof part === 'string' ? part : foldText(this.session, this.folds, part.compiled, part.entry);
      if (text === undefined) return undefined;
      texts.push(text);
    }
    return this.#simpleFolded<R>(texts.join('; '));
  }

  /** A registered statement's `first`, the statement and its `after`, each in a round trip of its own. */
  async #sendEach<R>(
    compiled: CompiledQuery,
    entry: StatementEntry | undefined,
    then: string | undefined,
  ): Promise<QueryResult<R>> {
    const first =
      entry?.first === undefined
        ? undefined
        : await this.send<R>({ ...compiled, sql: entry.first }, this.names.get(entry.first));
    const result = await this.send<R>(compiled, entry);
    if (then) await this.simple(then);
    return first === undefined ? result : withFirst(first, result);
  }

  begin(settings: TransactionSettings): void {
    this.#begin = beginStatement(settings);
    this.#inTransaction = true;
  }

  commit(): Promise<void> {
    const begin = this.#begin;
    const tails = this.#tails;
    this.#reset();
    // Nothing was sent in this transaction: nothing to open or close (a held-back statement
    // needs one before it, so there is none either).
    if (begin !== undefined && tails.length === 0) return Promise.resolve();
    // The common case, without an async layer of ours: the held-back statements and COMMIT.
    if (begin === undefined) {
      const sent = this.#sendParts([...this.#partsOf(tails), 'commit']);
      if (sent) return sent.then(nothing);
    }
    return this.#commitEach(begin, tails);
  }

  #partsOf(tails: readonly CompiledQuery[]): Part[] {
    return tails.map((tail) => ({ compiled: tail, entry: this.names.get(tail.sql) }));
  }

  /** COMMIT after a BEGIN not sent yet, or held-back statements that cannot be folded. */
  async #commitEach(begin: string | undefined, tails: readonly CompiledQuery[]): Promise<void> {
    if (begin !== undefined) await this.simple(begin);
    const sent = this.#sendParts([...this.#partsOf(tails), 'commit']);
    if (sent) {
      await sent;
      return;
    }
    for (const tail of tails) await this.send(tail, this.names.get(tail.sql));
    await this.simple('commit');
  }

  async rollback(): Promise<void> {
    const sent = this.#begin === undefined;
    this.#reset();
    if (sent) await this.simple('rollback');
  }

  #reset(): void {
    this.#begin = undefined;
    this.#tails = [];
    this.#inTransaction = false;
  }

  executeQuery<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
    const entry = this.names.get(compiled.sql);
    // The common case, the handler's own statements in a transaction already sent: straight to
    // the driver, without an async layer of ours (each costs a promise and a microtask turn).
    if (
      this.#begin === undefined &&
      this.#tails.length === 0 &&
      (entry === undefined || (entry.rides === 'none' && entry.first === undefined && !entry.after))
    )
      return this.send<R>(compiled, entry);
    return this.#execute<R>(compiled, entry);
  }

  async #execute<R>(compiled: CompiledQuery, entry: StatementEntry | undefined): Promise<QueryResult<R>> {
    if (entry?.rides === 'begin' && !this.#inTransaction) return this.#alone<R>(compiled, entry);
    if (entry?.rides === 'commit' && this.#inTransaction) {
      this.#tails.push(compiled);
      return { rows: [] };
    }
    if (this.#tails.length > 0 && entry && this.#begin === undefined) {
      // Held-back statements ride on the next registered statement as they would on COMMIT:
      // in a batch of events, the next event's SAVEPOINT carries the previous one's result.
      const folded = await this.#foldOnTails<R>(compiled, entry);
      if (folded) return folded;
    }
    // Order is kept: a statement after held-back ones sends them first.
    for (const tail of this.#tails.splice(0)) await this.send(tail, this.names.get(tail.sql));
    if (this.#begin !== undefined) {
      const begin = this.#begin;
      this.#begin = undefined;
      if (entry?.rides === 'begin') {
        const folded = await this.#foldOnBegin<R>(begin, compiled, entry, entry.after);
        if (folded) return folded;
      }
      await this.simple(begin);
    } else if (entry && (entry.first !== undefined || entry.after)) {
      // Inside a transaction already begun (the claim after the try-claim found it could not
      // decide alone): the statement and its companions still go in one round trip.
      const folded = await this.#fold<R>([], compiled, entry, entry.after);
      if (folded) return folded;
    }
    return this.#sendEach<R>(compiled, entry, entry?.after);
  }

  /**
   * A statement that opens our transactions, sent outside one: a READ COMMITTED transaction of
   * its own, in one round trip. PostgreSQL runs the statements of one simple query as one
   * implicit transaction, committed (or rolled back, on an error) before it answers: no lock
   * is held while the answer travels back, and the connection is left outside a transaction.
   * Its `after` (a savepoint) has no transaction to mark. Values that cannot be folded: BEGIN,
   * the statement, COMMIT.
   */
  async #alone<R>(compiled: CompiledQuery, entry: StatementEntry): Promise<QueryResult<R>> {
    const folded = await this.#foldOnBegin<R>(ALONE_READ_COMMITTED, compiled, entry, undefined);
    if (folded) return folded;
    await this.simple(beginStatement({ isolationLevel: 'read committed' }));
    try {
      const result = await this.#sendEach<R>(compiled, entry, undefined);
      await this.simple('commit');
      return result;
    } catch (err) {
      await this.simple('rollback').catch(() => {});
      throw err;
    }
  }

  /**
   * The held-back statements and a registered one (and its `after`) in one query; the
   * registered one's rows. Undefined when a value cannot be folded (the caller sends each).
   */
  async #foldOnTails<R>(compiled: CompiledQuery, entry: StatementEntry): Promise<QueryResult<R> | undefined> {
    const folded = await this.#fold<R>(this.#partsOf(this.#tails), compiled, entry, entry.after);
    if (folded) this.#tails = [];
    return folded;
  }

  // biome-ignore lint/correctness/useYield: streaming is not supported on our drivers.
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('webhook-inbox: streaming queries are not supported');
  }
}

/** What COMMIT answers: nothing the caller reads. */
function nothing(): void {}

/** A statement's result with its `first`'s beside it (the try-claim's read, with the try-lock's answer). */
function withFirst<R>(first: QueryResult<unknown> | undefined, result: QueryResult<R>): StatementResult<R> {
  return first === undefined ? result : { ...result, first };
}
