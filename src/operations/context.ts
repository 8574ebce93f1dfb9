/**
 * What every operator action shares: the tables it acts on, the source it is narrowed to, and
 * the look-ups that turn an operator's id or key into one (source, row) or refuse it.
 */
import { type Kysely, type RawBuilder, sql } from 'kysely';
import { parseDuration } from '../duration.js';
import { OperationError } from '../errors.js';
import { type Tables, toNumber } from '../sql/tables.js';

/** The most rows one list or `--all` action handles. */
export const MAX_LIST = 10_000;

/**
 * The database, the tables and the source an action runs on. Without `source` (the CLI's
 * default) it acts on every source, and an id or key found in several is refused as ambiguous.
 */
export interface OperationsContext {
  readonly db: Kysely<any>;
  readonly tables: Tables;
  readonly source?: string;
  /**
   * How long an action waits for a row another transaction holds (a key a delivery or a drain
   * is applying) before it gives up, as a delivery does. @defaultValue 5000
   */
  readonly lockTimeoutMs?: number;
}

/** The inbox's own default `lockTimeoutMs`, for actions given none. */
export const DEFAULT_LOCK_TIMEOUT_MS = 5000;

/** One of the inbox's tables, for splicing into a statement (its name is validated at start). */
export function table(ctx: OperationsContext, name: 'events' | 'keys' | 'gaps'): RawBuilder<unknown> {
  return sql.raw(ctx.tables[name]);
}

/** `column = source`, or `true` when the action covers every source. */
export function sourceIs(column: string, source: string | undefined): RawBuilder<unknown> {
  return source === undefined ? sql`true` : sql`${sql.ref(column)} = ${source}`;
}

export function durationMs(name: string, value: number | string): number {
  const ms = parseDuration(value);
  if (ms === undefined) {
    throw new TypeError(
      `webhook-inbox: \`${name}\` must be milliseconds or a duration like '7d', '12h', '30m'; got ${JSON.stringify(value)}`,
    );
  }
  return ms;
}

export function limitOf(value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1 || value > MAX_LIST) {
    throw new TypeError(`webhook-inbox: \`limit\` must be an integer from 1 to ${MAX_LIST}; got ${value}`);
  }
  return value;
}

/** An age Postgres computed in ms (numeric, as text), as a whole non-negative number. */
export function ageMs(value: unknown): number | null {
  return value === null || value === undefined ? null : Math.max(0, Math.round(Number(value)));
}

function notFoundOrAmbiguous(what: string, source: string | undefined, sources: string[]): never {
  if (sources.length === 0) {
    throw new OperationError(
      'not-found',
      `no ${what}${source === undefined ? '' : ` in source ${JSON.stringify(source)}`}`,
    );
  }
  throw new OperationError(
    'ambiguous',
    `${what} exists in several sources (${sources.join(', ')}); name one with --source`,
  );
}

export interface FoundEvent {
  readonly source: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly status: string;
}

/** The (source, key, seq, status) of an event id, or an OperationError (not found, ambiguous). */
export async function findEvent(
  ctx: OperationsContext,
  id: string,
  source: string | undefined,
): Promise<FoundEvent> {
  const { rows } = await sql<any>`
    select source, key, seq, status from ${table(ctx, 'events')} e
     where e.id = ${id} and ${sourceIs('e.source', source)}
     limit 5`.execute(ctx.db);
  if (rows.length !== 1) {
    const what = rows.length === 0 ? 'event with id' : 'event id';
    notFoundOrAmbiguous(
      `${what} ${JSON.stringify(id)}`,
      source,
      rows.map((r) => r.source),
    );
  }
  return { source: rows[0].source, key: rows[0].key, seq: toNumber(rows[0].seq), status: rows[0].status };
}

/** The source of a key, or an OperationError (not found, ambiguous). */
export async function findKey(
  ctx: OperationsContext,
  key: string,
  source: string | undefined,
): Promise<{ source: string }> {
  const { rows } = await sql<any>`
    select source from ${table(ctx, 'keys')} k where k.key = ${key} and ${sourceIs('k.source', source)}
     limit 5`.execute(ctx.db);
  if (rows.length !== 1) {
    notFoundOrAmbiguous(
      `key ${JSON.stringify(key)}`,
      source,
      rows.map((r) => r.source),
    );
  }
  return { source: rows[0].source };
}
