/** What every operator action shares: its tables and source, and the look-ups of an id or key. */
import { type Kysely, type RawBuilder, sql, type Transaction } from 'kysely';
import { toNumber } from '../db/column-readers.js';
import { sqlState } from '../db/drivers/postgres-error.js';
import type { Tables } from '../db/sql/tables.js';
import { parseDuration } from '../duration.js';
import { OperationError } from '../errors.js';
import { DEFAULT_LOCK_TIMEOUT_MS } from '../options/options.js';

export const MAX_LIST = 10_000;

export interface OperationsContext {
  readonly db: Kysely<any>;
  readonly tables: Tables;
  readonly source?: string;
  readonly lockTimeoutMs?: number;
  readonly secretHeaders?: ReadonlySet<string>;
}

/** An action's own bound on its wait for a held key, over the operations' `lockTimeoutMs`. */
export interface LockWaitOptions {
  /** How long the action waits for a held key before OperationError `locked`. @defaultValue the operations' `lockTimeoutMs` */
  lockTimeoutMs?: number;
}

/** What a `locked` failure names: what was not done (`replayed`, `skipped`…), and the row it waited for. */
export interface LockedWhat {
  readonly subject: string;
  readonly verb: string;
  readonly held: string;
}

export function eventIn(id: string, source: string): string {
  return `event ${JSON.stringify(id)} (source ${JSON.stringify(source)})`;
}

export function keyIn(key: string, source: string): string {
  return `key ${JSON.stringify(key)} (source ${JSON.stringify(source)})`;
}

/** `fn` read-committed, its lock waits bounded (OperationError `locked`): a slow handler's key says why. */
export async function boundedLockWait<T>(
  ctx: OperationsContext,
  options: LockWaitOptions,
  what: LockedWhat,
  fn: (tx: Transaction<any>) => Promise<T>,
): Promise<T> {
  const ms = options.lockTimeoutMs ?? ctx.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
  try {
    return await ctx.db
      .transaction()
      .setIsolationLevel('read committed')
      .execute(async (tx) => {
        await sql`select set_config('lock_timeout', ${`${ms}ms`}, true)`.execute(tx);
        return fn(tx);
      });
  } catch (err) {
    if (sqlState(err) !== '55P03') throw err;
    throw new OperationError(
      'locked',
      `${what.subject} was not ${what.verb}: ${what.held} stayed locked for ${ms} ms ` +
        '(a delivery, a drain or another operator action holds it); try again',
    );
  }
}

export function table(ctx: OperationsContext, name: 'events' | 'keys' | 'gaps'): RawBuilder<unknown> {
  return sql.raw(ctx.tables[name]);
}

const citusOf = new WeakMap<object, Promise<boolean>>();

/** A batch's rows `condition` (alias `e`) picks: SKIP LOCKED, or on Citus unlocked and checked again. */
export async function batchTaking(
  ctx: OperationsContext,
  condition: RawBuilder<unknown>,
): Promise<{ lock: RawBuilder<unknown>; recheck: RawBuilder<unknown> }> {
  let citus = citusOf.get(ctx.db);
  if (!citus) {
    citus = sql<{ on: boolean }>`select exists (select 1 from pg_extension where extname = 'citus') as on`
      .execute(ctx.db)
      .then((r) => r.rows[0]?.on === true);
    citusOf.set(ctx.db, citus);
  }
  return (await citus)
    ? { lock: sql``, recheck: sql`and ${condition}` }
    : { lock: sql`for update skip locked`, recheck: sql`` };
}

/** The source an action runs on: operations made for one source answer `not-found` for another. */
export function scoped(ctx: OperationsContext, asked: string | undefined): string | undefined {
  if (asked === undefined || asked === ctx.source) return ctx.source;
  if (ctx.source === undefined) return asked;
  throw new OperationError(
    'not-found',
    `no source ${JSON.stringify(asked)} here: these operations act on source ${JSON.stringify(ctx.source)} only`,
  );
}

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

export function msAgo(ms: number): RawBuilder<unknown> {
  return sql`now() - ${ms}::bigint * interval '1 millisecond'`;
}

function integerIn(name: string, value: number | undefined, fallback: number, max: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new TypeError(`webhook-inbox: \`${name}\` must be an integer from 1 to ${max}; got ${value}`);
  }
  return value;
}

export function batchSizeOf(value: number | undefined, fallback: number, max = 100_000): number {
  return integerIn('batchSize', value, fallback, max);
}

export function limitOf(value: number | undefined, fallback: number): number {
  return integerIn('limit', value, fallback, MAX_LIST);
}

export function ageMs(value: unknown): number | null {
  return value === null || value === undefined ? null : Math.max(0, Math.round(Number(value)));
}

function notFoundOrAmbiguous(
  what: string,
  source: string | undefined,
  found: readonly { source: string }[],
): never {
  if (found.length === 0) {
    throw new OperationError(
      'not-found',
      `no ${what}${source === undefined ? '' : ` in source ${JSON.stringify(source)}`}`,
    );
  }
  throw new OperationError(
    'ambiguous',
    `${what} exists in several sources (${found.map((r) => r.source).join(', ')}); name one with --source`,
  );
}

export interface FoundEvent {
  readonly source: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly status: string;
}

/** The sources in a table, by a walk of its primary key: one index probe per source. */
export function sourcesIn(ctx: OperationsContext, name: 'events' | 'keys'): RawBuilder<unknown> {
  const t = table(ctx, name);
  return sql`(with recursive s(source) as (
      (select source from ${t} order by source limit 1)
      union all
      select (select x.source from ${t} x where x.source > s.source order by x.source limit 1)
        from s where s.source is not null)
    select source from s where source is not null)`;
}

/** The sources an action reads, one statement each: a join over the walk would pass `jit_above_cost`. */
export async function eachSource(ctx: OperationsContext, source: string | undefined): Promise<string[]> {
  if (source !== undefined) return [source];
  const { rows } = await sql<{ source: string }>`select source from ${sourcesIn(ctx, 'events')} s`.execute(
    ctx.db,
  );
  return rows.map((r) => r.source);
}

/** An event id's row, looked up per source through the primary key (an `id` index would cost every insert). */
export async function findEvent(
  ctx: OperationsContext,
  id: string,
  source: string | undefined,
): Promise<FoundEvent> {
  const asked = scoped(ctx, source);
  const sources = asked === undefined ? sourcesIn(ctx, 'events') : sql`(select ${asked}::text as source)`;
  const { rows } = await sql<any>`
    select e.source, e.key, e.seq, e.status from ${sources} s
      join ${table(ctx, 'events')} e on e.source = s.source and e.id = ${id}
     limit 5`.execute(ctx.db);
  if (rows.length !== 1) {
    const what = rows.length === 0 ? 'event with id' : 'event id';
    notFoundOrAmbiguous(`${what} ${JSON.stringify(id)}`, source, rows);
  }
  return { source: rows[0].source, key: rows[0].key, seq: toNumber(rows[0].seq), status: rows[0].status };
}

export async function findKey(
  ctx: OperationsContext,
  key: string,
  source: string | undefined,
): Promise<{ source: string }> {
  const { rows } = await sql<any>`
    select source from ${table(ctx, 'keys')} k where k.key = ${key} and ${sourceIs('k.source', scoped(ctx, source))}
     limit 5`.execute(ctx.db);
  if (rows.length !== 1) notFoundOrAmbiguous(`key ${JSON.stringify(key)}`, source, rows);
  return { source: rows[0].source };
}
