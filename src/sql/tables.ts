import { CompiledQuery, type Kysely } from 'kysely';
import type { Fold, StatementNames } from '../drivers/common.js';

/**
 * Qualified, quoted names of the inbox's tables and functions. The schema and prefix are
 * validated as plain identifiers when options are resolved, so they are escaped here once
 * (as Graphile Worker does) and every statement below is otherwise parameterised.
 */
export interface Tables {
  readonly schema: string;
  readonly prefix: string;
  readonly events: string;
  readonly keys: string;
  readonly gaps: string;
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
    fn: q,
    local: (name: string) => quote(prefix + name),
  };
}

/** A statement with a fixed text, sent as a named prepared statement where the driver can. */
export interface Statement {
  readonly text: string;
  run<R>(db: Kysely<any>, parameters: readonly unknown[]): Promise<R[]>;
}

export function defineStatement(
  names: StatementNames,
  tables: Tables,
  name: string,
  text: string,
  fold?: Fold,
  then?: string,
  first?: string,
): Statement {
  // Names are per connection, and one pool may serve inboxes in several schemas.
  names.register(`wi:${tables.schema}.${tables.prefix}${name}`, text, fold, then, first);
  return {
    text,
    async run<R>(db: Kysely<any>, parameters: readonly unknown[]): Promise<R[]> {
      const result = await db.executeQuery<R>(CompiledQuery.raw(text, parameters as unknown[]));
      return result.rows as R[];
    },
  };
}
