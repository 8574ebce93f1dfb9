import { CompiledQuery, type Kysely } from 'kysely';
import type { Rides, StatementNames, StatementResult } from '../drivers/common.js';
import { quote } from '../drivers/literals.js';

/** Qualified, quoted names; schema and prefix are validated identifiers, everything else a parameter. */
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

/** A row's stream as SQL: one key's events, keys and gaps rows share it, on one Citus shard. */
export function stream(key: string, id = 'null::text'): string {
  return `coalesce(${key}, ${id})`;
}

/** The same, of values: what a statement binds where it names a stream. */
export function streamOf(key: string | null, id: string | null = null): string {
  return (key ?? id)!;
}

/** Any Kysely instance or transaction. */
export type Queryable = Pick<Kysely<unknown>, 'executeQuery' | 'getExecutor'>;

/** A statement with a fixed text, and how it travels; `Row` as a pool's parsers may make it. */
export interface Statement<Row = never> {
  readonly text: string;
  run(db: Queryable, parameters: readonly unknown[]): Promise<Row[]>;
  /** With the result of the statement's `first` beside the rows (on our drivers). */
  result(db: Queryable, parameters: readonly unknown[]): Promise<StatementResult<Row>>;
}

export interface Travel {
  readonly rides: Rides;
  /** Sent right after it, in the same round trip (the SAVEPOINT after a take). */
  readonly after?: string;
  /** Sent right before it with the same parameters (see `StatementEntry.first`). */
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
