/**
 * Folding, shared by our two drivers (src/drivers/pg.ts, src/drivers/pglite.ts): BEGIN is not
 * sent on its own. It waits for the transaction's first statement and, when that is one
 * registered `after-begin` (the claim, the take statements), both go as one simple-protocol
 * query: `begin; select * from claim('…', …)`. A statement registered `before-commit` (the
 * stored result) is held back and sent with COMMIT. A new event then costs what a bare
 * transaction costs: BEGIN+claim, the handler's statements, result+COMMIT. A statement may
 * name one to send right after it (`then`: the SAVEPOINT after a take). Held-back statements
 * ride likewise on the next registered statement, when one comes before COMMIT (a batch of
 * events: the next event's SAVEPOINT carries the last result).
 *
 * What a fold saves differs by driver: a network round trip on pg (node-postgres has no
 * pipelining); on PGlite, a call into the embedded database, whose fixed cost (the protocol
 * written and read in JavaScript, the step into WebAssembly) measured 50–90 µs, more than
 * most of our statements' own work.
 *
 * The simple protocol takes no parameters, so the values are written as literals by pg's own
 * `escapeLiteral` (bytea as hex, JSON as text), never concatenated by hand; a value too large
 * to be worth it (over `MAX_FOLDED_CHARS`) travels as a parameter instead, with BEGIN sent
 * first. A transaction that sends nothing sends neither BEGIN nor COMMIT.
 *
 * An `after-begin` statement sent outside a transaction is a transaction of its own (deferred
 * mode's claim): `SET TRANSACTION` rides on it, and PostgreSQL runs the two as one implicit
 * transaction that commits before the answer leaves the server.
 */
import type { CompiledQuery, DatabaseConnection, QueryResult, TransactionSettings } from 'kysely';
import pg from 'pg';
import { beginStatement, type StatementEntry, type StatementNames } from './common.js';

/** Past this many characters of literals, folding costs more CPU than the round trip it saves. */
const MAX_FOLDED_CHARS = 64 * 1024;

/**
 * The isolation of every transaction the inbox opens (ARCHITECTURE.md, "READ COMMITTED,
 * always"), for a statement that is its own transaction: first in its query, it sets the
 * implicit transaction's, whatever the server's `default_transaction_isolation`.
 */
const ALONE_READ_COMMITTED = 'set transaction isolation level read committed';

const { escapeLiteral } = pg;
const NEEDS_ESCAPING = /['\\]/;

/** One value as a SQL literal, or undefined when it cannot (or should not) be folded. */
function literal(value: unknown): string | undefined {
  if (value === null || value === undefined) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      return Number.isFinite(value) ? String(value) : undefined;
    case 'bigint':
      return value.toString();
    case 'string':
      // What escapeLiteral returns for text without quotes or backslashes, without its
      // character-by-character loop (ids, hashes, JSON of most results).
      return NEEDS_ESCAPING.test(value) ? escapeLiteral(value) : `'${value}'`;
  }
  if (value instanceof Uint8Array)
    return `${escapeLiteral(`\\x${Buffer.from(value).toString('hex')}`)}::bytea`;
  if (value instanceof Date) return `${escapeLiteral(value.toISOString())}::timestamptz`;
  return undefined;
}

/** The literals of a statement's parameters, or undefined when they cannot (or should not) be folded. */
export function literalsOf(compiled: CompiledQuery): string[] | undefined {
  let size = 0;
  const literals: string[] = [];
  for (const value of compiled.parameters) {
    const text = literal(value);
    if (text === undefined) return undefined;
    size += text.length;
    if (size > MAX_FOLDED_CHARS) return undefined;
    literals.push(text);
  }
  return literals;
}

/**
 * A statement's text with its `$n` placeholders replaced by literals. Registered statements are
 * ours: their text has no `$` but the placeholders.
 */
export function inline(sql: string, literals: string[]): string {
  const parts = placeholderSplit(sql);
  let text = parts[0] as string;
  for (let i = 1; i < parts.length; i += 2) text += literals[(parts[i] as number) - 1] + parts[i + 1];
  return text;
}

/** A statement's text split around its `$n` placeholders (text, n, text, …), once per text. */
const splits = new Map<string, Array<string | number>>();
function placeholderSplit(sql: string): Array<string | number> {
  let parts = splits.get(sql);
  if (!parts) {
    parts = sql.split(/\$(\d+)/).map((part, i) => (i % 2 === 1 ? Number(part) : part));
    // Registered statements only (a handful per schema); a bound keeps a misuse from growing it.
    if (splits.size < 1000) splits.set(sql, parts);
  }
  return parts;
}

/**
 * A connection that folds. A driver gives it the two ways it has of sending: `simple` (text on
 * the simple protocol, several statements, the rows of one of them) and `send` (one statement
 * with its parameters); it may change how a registered statement is written into a fold
 * (`foldText`: pg EXECUTEs prepared statements) and how BEGIN's fold is sent (`foldOnBegin`).
 */
export abstract class FoldingConnection implements DatabaseConnection {
  /** A BEGIN not sent yet: it rides on the transaction's first statement. */
  #begin: string | undefined;
  /** In a transaction (sent or not): `before-commit` statements wait for COMMIT. */
  #inTransaction = false;
  /** Statements held back to ride on COMMIT, in order. */
  #tails: CompiledQuery[] = [];

  constructor(readonly names: StatementNames) {}

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

  /** A registered statement as folded text (its text with the literals in), or undefined when it cannot be. */
  protected foldText(compiled: CompiledQuery, _entry: StatementEntry | undefined): string | undefined {
    const literals = literalsOf(compiled);
    return literals && inline(compiled.sql, literals);
  }

  /**
   * BEGIN (or, for a statement alone, SET TRANSACTION) and an `after-begin` statement (and
   * `then`) in one query. Undefined when the values cannot be folded (the caller sends BEGIN
   * alone, then the statement).
   */
  protected foldOnBegin<R>(
    begin: string,
    compiled: CompiledQuery,
    entry: StatementEntry,
    then: string | undefined,
  ): Promise<QueryResult<R> | undefined> {
    return this.#fold<R>([begin], compiled, entry, then);
  }

  /**
   * What goes before (BEGIN, held-back statements), a registered statement's `first`, the
   * statement and `then`, as one simple query: the statement's rows, with its `first`'s row
   * joined into each. Undefined when a value cannot be folded (the caller sends each).
   */
  async #fold<R>(
    before: readonly string[],
    compiled: CompiledQuery,
    entry: StatementEntry,
    then: string | undefined,
  ): Promise<QueryResult<R> | undefined> {
    const texts = [...before];
    if (entry.first !== undefined) {
      const first = this.foldText({ ...compiled, sql: entry.first }, this.names.get(entry.first));
      if (first === undefined) return undefined;
      texts.push(first);
    }
    const folded = this.foldText(compiled, entry);
    if (folded === undefined) return undefined;
    texts.push(folded);
    if (then) texts.push(then);
    const results = await this.simpleAll<R>(texts.join('; '));
    const at = results.length - (then ? 2 : 1);
    const result = results[at] ?? { rows: [] };
    return entry.first === undefined ? result : joinFirst(results[at - 1], result);
  }

  /** A registered statement's `first`, the statement and its `then`, each in a round trip of its own. */
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
    return first === undefined ? result : joinFirst(first, result);
  }

  begin(settings: TransactionSettings): void {
    this.#begin = beginStatement(settings);
    this.#inTransaction = true;
  }

  async commit(): Promise<void> {
    const begin = this.#begin;
    const tails = this.#tails;
    this.#reset();
    // Nothing was sent in this transaction: nothing to open or close (a held-back statement
    // needs one before it, so there is none either).
    if (begin !== undefined && tails.length === 0) return;
    if (begin !== undefined) await this.simple(begin);
    const folded = tails.map((tail) => this.foldText(tail, this.names.get(tail.sql)));
    if (folded.every((text) => text !== undefined)) {
      await this.simple([...folded, 'commit'].join('; '));
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

  async executeQuery<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
    const entry = this.names.get(compiled.sql);
    if (entry?.fold === 'after-begin' && !this.#inTransaction) return this.#alone<R>(compiled, entry);
    if (entry?.fold === 'before-commit' && this.#inTransaction) {
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
      if (entry?.fold === 'after-begin') {
        const folded = await this.foldOnBegin<R>(begin, compiled, entry, entry.then);
        if (folded) return folded;
      }
      await this.simple(begin);
    } else if (entry && (entry.first !== undefined || entry.then)) {
      // Inside a transaction already begun (the claim after the try-claim found it could not
      // decide alone): the statement and its companions still go in one round trip.
      const folded = await this.#fold<R>([], compiled, entry, entry.then);
      if (folded) return folded;
    }
    return this.#sendEach<R>(compiled, entry, entry?.then);
  }

  /**
   * A statement that opens our transactions, sent outside one: a READ COMMITTED transaction of
   * its own, in one round trip. PostgreSQL runs the statements of one simple query as one
   * implicit transaction, committed (or rolled back, on an error) before it answers: no lock
   * is held while the answer travels back, and the connection is left outside a transaction.
   * Its `then` (a savepoint) has no transaction to mark. Values that cannot be folded: BEGIN,
   * the statement, COMMIT.
   */
  async #alone<R>(compiled: CompiledQuery, entry: StatementEntry): Promise<QueryResult<R>> {
    const folded = await this.foldOnBegin<R>(ALONE_READ_COMMITTED, compiled, entry, undefined);
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
   * The held-back statements and a registered one (and its `then`) in one query; the
   * registered one's rows. Undefined when a value cannot be folded (the caller sends each).
   */
  async #foldOnTails<R>(compiled: CompiledQuery, entry: StatementEntry): Promise<QueryResult<R> | undefined> {
    const texts: string[] = [];
    for (const tail of this.#tails) {
      const text = this.foldText(tail, this.names.get(tail.sql));
      if (text === undefined) return undefined;
      texts.push(text);
    }
    const folded = await this.#fold<R>(texts, compiled, entry, entry.then);
    if (folded) this.#tails = [];
    return folded;
  }

  // biome-ignore lint/correctness/useYield: streaming is not supported on our drivers.
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('webhook-inbox: streaming queries are not supported');
  }
}

/**
 * A statement's result with the one row of its `first` joined into each of its rows (the
 * try-claim's read gets the try-lock's `locked`).
 */
function joinFirst<R>(first: QueryResult<R> | undefined, result: QueryResult<R>): QueryResult<R> {
  const row = first?.rows[0];
  if (row === undefined) return result;
  return { ...result, rows: result.rows.map((r) => ({ ...row, ...r })) };
}
