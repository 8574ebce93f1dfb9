/**
 * Our Kysely driver over a pg-shaped pool. Two things set it apart from a plain one:
 *
 * - Hot-path statements are named prepared statements (see `StatementNames`).
 * - **Folding**: BEGIN is not sent on its own. It waits for the transaction's first statement
 *   and, when that is one registered `after-begin` (the claim, the take statements), both go
 *   as one simple-protocol query: `begin; select * from claim('…', …)`. A statement registered
 *   `before-commit` (the stored result) is held back and sent with COMMIT. A new event then
 *   costs what a bare transaction costs: BEGIN+claim, the handler's statements, result+COMMIT.
 *   A statement may name one to send right after it (`then`: the SAVEPOINT after a take).
 *   Held-back statements ride likewise on the next registered statement, when one comes
 *   before COMMIT (a batch of events: the next event's SAVEPOINT carries the last result).
 *   node-postgres has no pipelining, and the simple protocol takes no parameters, so the
 *   values are written as literals by pg's own `escapeLiteral` (bytea as hex, JSON as text),
 *   never concatenated by hand; a value too large to be worth it (over `MAX_FOLDED_CHARS`)
 *   travels as a parameter instead, with BEGIN sent first. A transaction that sends nothing
 *   sends neither BEGIN nor COMMIT.
 */

import type { CompiledQuery, DatabaseConnection, Driver, QueryResult, TransactionSettings } from 'kysely';
import pg from 'pg';
import { beginStatement, boundedWait, type StatementEntry, type StatementNames } from './common.js';
import type { PgClientLike, PgPoolLike } from './shapes.js';

const MUTATING = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);
/** Clients that carry a permanent no-op 'error' listener (see PgConnection). */
const quieted = new WeakSet<object>();
const ignore = () => {};

/** Past this many characters of literals, folding costs more CPU than the round trip it saves. */
const MAX_FOLDED_CHARS = 64 * 1024;

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
function literalsOf(compiled: CompiledQuery): string[] | undefined {
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
 * The statement with its `$n` placeholders replaced by literals, or undefined when it cannot
 * be. Registered statements are ours: their text has no `$` but the placeholders.
 */
export function inlineParameters(compiled: CompiledQuery): string | undefined {
  const literals = literalsOf(compiled);
  return literals && inline(compiled.sql, literals);
}

function inline(sql: string, literals: string[]): string {
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

class PgConnection implements DatabaseConnection {
  /** Set when a query failed in a way that may have left the connection unusable. */
  broken: Error | undefined;
  /** A BEGIN not sent yet: it rides on the transaction's first statement. */
  #begin: string | undefined;
  /** In a transaction (sent or not): `before-commit` statements wait for COMMIT. */
  #inTransaction = false;
  /** Statements held back to ride on COMMIT, in order. */
  #tails: CompiledQuery[] = [];
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
    readonly names: StatementNames,
    readonly folds: FoldState = { textOnly: false },
  ) {
    client.on?.('error', this.onError);
    // Once per client, for good: a client released as broken is ended by the pool without its
    // idle listener, and a server shutting down (57P01) can still report on it while it ends.
    // Unheard, that 'error' ended the process (the chaos suite's PostgreSQL restarts).
    if (!quieted.has(client)) {
      quieted.add(client);
      client.on?.('error', ignore);
    }
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
    if (begin !== undefined) await this.#simple(begin);
    const folded = tails.map((tail) => this.#foldText(tail, this.names.get(tail.sql)));
    if (folded.every((text) => text !== undefined)) {
      await this.#simple([...folded, 'commit'].join('; '));
      return;
    }
    for (const tail of tails) await this.#send(tail);
    await this.#simple('commit');
  }

  async rollback(): Promise<void> {
    const sent = this.#begin === undefined;
    this.#reset();
    if (sent) await this.#simple('rollback');
  }

  #reset(): void {
    this.#begin = undefined;
    this.#tails = [];
    this.#inTransaction = false;
  }

  async executeQuery<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
    const entry = this.names.get(compiled.sql);
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
    for (const tail of this.#tails.splice(0)) await this.#send(tail);
    if (this.#begin !== undefined) {
      const begin = this.#begin;
      this.#begin = undefined;
      if (entry?.fold === 'after-begin') {
        const folded = await this.#foldOnBegin<R>(begin, compiled, entry);
        if (folded) return folded;
      }
      await this.#simple(begin);
    }
    const result = await this.#send<R>(compiled, entry?.name);
    if (entry?.then) await this.#simple(entry.then);
    return result;
  }

  /**
   * BEGIN and an `after-begin` statement (and its `then`) in one round trip. Undefined when
   * the values cannot be folded (the caller sends BEGIN alone, then the statement).
   */
  async #foldOnBegin<R>(
    begin: string,
    compiled: CompiledQuery,
    entry: StatementEntry,
  ): Promise<QueryResult<R> | undefined> {
    const prepared = preparedOn.get(this.client);
    if (entry.prepared && !this.folds.textOnly && prepared !== 'inline' && !prepared?.has(entry.prepared))
      await this.#prepareFolds();
    const send = () => {
      const folded = this.#foldText(compiled, entry);
      if (folded === undefined) return undefined;
      return this.#simple<R>(`${begin}; ${folded}${entry.then ? `; ${entry.then}` : ''}`, entry.then ? 2 : 1);
    };
    try {
      return await send();
    } catch (err) {
      // Its prepared statement was deallocated behind our back (DISCARD ALL, a pooler that
      // swapped backends). Nothing but BEGIN ran in this transaction: roll it back and send
      // the same as text (the connection folds text from now on), rather than fail a delivery.
      if ((err as { code?: string }).code !== UNDEFINED_PREPARED_STATEMENT || this.broken) throw err;
      await this.#simple('rollback');
      return send();
    }
  }

  /**
   * The held-back statements and a registered one (and its `then`) in one round trip; the
   * registered one's rows. Undefined when a value cannot be folded (the caller sends each).
   */
  async #foldOnTails<R>(compiled: CompiledQuery, entry: StatementEntry): Promise<QueryResult<R> | undefined> {
    const texts = this.#tails.map((tail) => this.#foldText(tail, this.names.get(tail.sql)));
    texts.push(this.#foldText(compiled, entry));
    if (!texts.every((text) => text !== undefined)) return undefined;
    this.#tails = [];
    if (entry.then) texts.push(entry.then);
    return this.#simple<R>(texts.join('; '), entry.then ? 2 : 1);
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
      await this.#simple(missing.map(([text, e]) => `prepare ${e.prepared} as ${text}`).join('; '));
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
  #foldText(compiled: CompiledQuery, entry: StatementEntry | undefined): string | undefined {
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
  #send<R>(compiled: CompiledQuery, name = this.names.get(compiled.sql)?.name): Promise<QueryResult<R>> {
    const values = compiled.parameters as unknown[];
    return this.#query<R>(name ? { name, text: compiled.sql, values } : { text: compiled.sql, values });
  }

  /** Text on the simple protocol (no values): several statements; the rows of the `fromEnd`th last. */
  #simple<R>(text: string, fromEnd = 1): Promise<QueryResult<R>> {
    return this.#query<R>({ text }, fromEnd);
  }

  async #query<R>(
    config: { text: string; values?: unknown[]; name?: string },
    fromEnd = 1,
  ): Promise<QueryResult<R>> {
    try {
      const answer: unknown = await this.client.query(config);
      // Several statements on the simple protocol answer one result each.
      const result = (Array.isArray(answer) ? answer.at(-fromEnd) : answer) as {
        rows?: R[];
        rowCount: number | null;
        command?: string;
      };
      return {
        rows: result.rows ?? [],
        numAffectedRows:
          result.command && MUTATING.has(result.command) ? BigInt(result.rowCount ?? 0) : undefined,
      };
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

  // biome-ignore lint/correctness/useYield: streaming is not supported on this driver.
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('webhook-inbox: streaming queries are not supported');
  }
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
