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
 *   node-postgres has no pipelining, and the simple protocol takes no parameters, so the
 *   values are written as literals by pg's own `escapeLiteral` (bytea as hex, JSON as text),
 *   never concatenated by hand; a value too large to be worth it (over `MAX_FOLDED_CHARS`)
 *   travels as a parameter instead, with BEGIN sent first. A transaction that sends nothing
 *   sends neither BEGIN nor COMMIT.
 */

import type { CompiledQuery, DatabaseConnection, Driver, QueryResult, TransactionSettings } from 'kysely';
import pg from 'pg';
import { beginStatement, boundedWait, type StatementNames } from './common.js';
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

/**
 * The statement with its `$n` placeholders replaced by literals, or undefined when it cannot
 * be. Registered statements are ours: their text has no `$` but the placeholders.
 */
export function inlineParameters(compiled: CompiledQuery): string | undefined {
  let size = 0;
  const literals: string[] = [];
  for (const value of compiled.parameters) {
    const text = literal(value);
    if (text === undefined) return undefined;
    size += text.length;
    if (size > MAX_FOLDED_CHARS) return undefined;
    literals.push(text);
  }
  const parts = placeholderSplit(compiled.sql);
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
    const folded = tails.map(inlineParameters);
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
    // Order is kept: a statement after held-back ones sends them first.
    for (const tail of this.#tails.splice(0)) await this.#send(tail);
    if (this.#begin !== undefined) {
      const begin = this.#begin;
      this.#begin = undefined;
      const folded = entry?.fold === 'after-begin' ? inlineParameters(compiled) : undefined;
      if (folded) {
        if (!entry?.then) return this.#simple<R>(`${begin}; ${folded}`);
        return this.#simple<R>(`${begin}; ${folded}; ${entry.then}`, 2);
      }
      await this.#simple(begin);
    }
    const result = await this.#send<R>(compiled, entry?.name);
    if (entry?.then) await this.#simple(entry.then);
    return result;
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
  constructor(
    readonly pool: PgPoolLike,
    readonly names: StatementNames,
    readonly ownsPool: boolean,
    readonly waitTimeoutMs: number,
  ) {}
  async init(): Promise<void> {}
  async acquireConnection(): Promise<DatabaseConnection> {
    const client = await boundedWait(this.pool.connect(), this.waitTimeoutMs, (late) => late.release());
    return new PgConnection(client, this.names);
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
