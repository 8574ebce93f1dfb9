/**
 * Folding (pg.ts, pglite.ts): BEGIN goes with the first statement when it rides on `begin`, and a
 * `commit` statement with COMMIT, so a new event costs a bare transaction's round trips. Values are
 * written as literals into PREPAREd statements (prepared-folds.ts); one that cannot be travels bound.
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

/** For a statement that is its own transaction: READ COMMITTED whatever the server's default. */
const ALONE_READ_COMMITTED = 'set transaction isolation level read committed';

/** A registered statement with its parameters, or parameterless text (BEGIN, SAVEPOINT, COMMIT). */
type Part = string | { compiled: CompiledQuery; entry: StatementEntry | undefined };

/** A connection that folds, over a driver's `simpleAll` (simple protocol) and `send` (bound values). */
export abstract class FoldingConnection implements DatabaseConnection {
  /** A BEGIN not sent yet. */
  #begin: string | undefined;
  #inTransaction = false;
  /** Statements held back to ride on COMMIT. */
  #tails: CompiledQuery[] = [];

  constructor(
    readonly names: StatementNames,
    /** What the session lives on, which outlives this object: pg's pooled client, the PGlite instance. */
    handle: object,
    readonly folds: PoolFolds,
  ) {
    this.session = sessionOf(handle);
  }

  protected readonly session: Session;

  protected get inTransaction(): boolean {
    return this.#inTransaction;
  }

  protected abstract simpleAll<R>(text: string): Promise<QueryResult<R>[]>;

  /** The result of the `fromEnd`th last statement. */
  protected async simple<R>(text: string, fromEnd = 1): Promise<QueryResult<R>> {
    return (await this.simpleAll<R>(text)).at(-fromEnd) ?? { rows: [] };
  }
  protected abstract send<R>(
    compiled: CompiledQuery,
    entry: StatementEntry | undefined,
  ): Promise<QueryResult<R>>;

  /** When a prepared statement is gone (DISCARD ALL, a pooler's other backend), the pool folds literals. */
  #simpleFolded<R>(text: string): Promise<QueryResult<R>[]> {
    return this.simpleAll<R>(text).then(undefined, (err) => {
      lostStatements(this.folds, err);
      throw err;
    });
  }

  /** BEGIN (or SET TRANSACTION) and a statement that rides on it; undefined when it cannot fold. */
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
      // Its prepared statement was deallocated; nothing but BEGIN ran: send it again with literals.
      if (sqlState(err) !== UNDEFINED_PREPARED_STATEMENT) throw err;
      if (this.inTransaction) await this.simple('rollback');
      return await this.#fold<R>([begin], compiled, entry, then);
    }
  }

  /** `before`, the statement's `first`, the statement and `then` as one query; undefined when it cannot fold. */
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
    // Nothing was sent in this transaction: nothing to open or close.
    if (begin !== undefined && tails.length === 0) return Promise.resolve();
    // The common case, without an async layer of ours.
    if (begin === undefined) {
      const sent = this.#sendParts([...this.#partsOf(tails), 'commit']);
      if (sent) return sent.then(nothing);
    }
    return this.#commitEach(begin, tails);
  }

  #partsOf(tails: readonly CompiledQuery[]): Part[] {
    return tails.map((tail) => ({ compiled: tail, entry: this.names.get(tail.sql) }));
  }

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
    // The handler's own statements: straight to the driver, without an async layer of ours.
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
      // In a batch, the next event's SAVEPOINT carries the previous one's result.
      const folded = await this.#foldOnTails<R>(compiled, entry);
      if (folded) return folded;
    }
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
      // Inside a transaction already begun: the statement and its companions in one round trip.
      const folded = await this.#fold<R>([], compiled, entry, entry.after);
      if (folded) return folded;
    }
    return this.#sendEach<R>(compiled, entry, entry?.after);
  }

  /** Outside a transaction, one simple query commits before answering: no lock held meanwhile. */
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

function nothing(): void {}

function withFirst<R>(first: QueryResult<unknown> | undefined, result: QueryResult<R>): StatementResult<R> {
  return first === undefined ? result : { ...result, first };
}
