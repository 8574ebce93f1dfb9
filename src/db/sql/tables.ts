import { CompiledQuery, type Kysely } from 'kysely';
import type { Rides, StatementNames, StatementResult } from '../drivers/common.js';

/**
 * Qualified, quoted names of the inbox's tables and functions; schema and prefix are validated
 * identifiers, so every statement is otherwise parameterised.
 */
export interface Tables {
  readonly schema: string;
  readonly prefix: string;
  readonly events: string;
  readonly keys: string;
  readonly gaps: string;
  readonly groups: string;
  /** A function of ours, qualified: `fn('claim')` → `"webhook_inbox"."claim"`. */
  fn(name: string): string;
  /** An index or constraint name (unqualified, as CREATE INDEX wants it). */
  local(name: string): string;
}

function quote(identifier: string): string {
  return `"${identifier.replace(/"/g, '""')}"`;
}

export function createTables(schema: string, prefix: string): Tables {
  const q = (name: string) => `${quote(schema)}.${quote(prefix + name)}`;
  return {
    schema,
    prefix,
    events: q('events'),
    keys: q('keys'),
    gaps: q('gaps'),
    groups: q('groups'),
    fn: q,
    local: (name: string) => quote(prefix + name),
  };
}

/**
 * A row's stream as SQL, from its key and id: the events, keys and gaps rows of one key share it (a
 * key row's is its key's), so a Citus cluster keeps them on one shard (docs/citus.md). The one place
 * it is computed; every insert writes it and every statement that locks a row names it.
 */
export function stream(key: string, id = 'null::text'): string {
  return `coalesce(${key}, ${id})`;
}

/** The same, of values: what a statement binds where it names a stream. */
export function streamOf(key: string | null, id: string | null = null): string {
  return (key ?? id)!;
}

/** What the statements run on: any Kysely instance or transaction (they are raw SQL of their own types). */
export type Queryable = Pick<Kysely<unknown>, 'executeQuery' | 'getExecutor'>;

/**
 * A statement with a fixed text, and how it travels (ARCHITECTURE.md, "One statement to the wire").
 * `Row` is the shape of its rows, each column as a pool's parsers may make it (src/db/column-readers.ts).
 */
export interface Statement<Row = never> {
  readonly text: string;
  run(db: Queryable, parameters: readonly unknown[]): Promise<Row[]>;
  /** The rows, with the result of the statement's `first` beside them (on our drivers). */
  result(db: Queryable, parameters: readonly unknown[]): Promise<StatementResult<Row>>;
}

export interface Travel {
  readonly rides: Rides;
  /** A parameterless statement sent right after it, in the same round trip (the SAVEPOINT after a take). */
  readonly after?: string;
  /**
   * Sent right before it, with the same parameters, in one round trip; its result comes back beside
   * (`result().first`). Two statements: the second's snapshot is taken after the first ran.
   */
  readonly first?: Statement<unknown>;
}

export function defineStatement<Row = never>(
  names: StatementNames,
  tables: Tables,
  name: string,
  text: string,
  travel: Travel = { rides: 'none' },
): Statement<Row> {
  // Names are per connection, and one pool may serve inboxes in several schemas.
  names.register(`wi:${tables.schema}.${tables.prefix}${name}`, text, {
    rides: travel.rides,
    after: travel.after,
    first: travel.first?.text,
  });
  const result = (db: Queryable, parameters: readonly unknown[]) =>
    db.executeQuery<Row>(CompiledQuery.raw(text, parameters as unknown[])) as Promise<StatementResult<Row>>;
  return {
    text,
    result,
    async run(db: Queryable, parameters: readonly unknown[]): Promise<Row[]> {
      return (await result(db, parameters)).rows;
    },
  };
}
