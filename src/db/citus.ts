import { type Kysely, sql } from 'kysely';
import type { Tables } from './sql/tables.js';

/** Option `citus` (docs/citus.md): the inbox's tables distributed on a Citus cluster. */
export interface CitusOptions {
  /**
   * A distributed table of yours whose distribution column holds the events' keys, to colocate with.
   * @defaultValue the inbox's tables are colocated with each other only
   */
  readonly colocateWith?: string;
}

/**
 * Distributes the events, keys and gaps tables by stream and groups by group, colocated, once, under
 * the migrations' lock. The functions stay on the coordinator, which sees every shard's rows and locks
 * (docs/citus.md).
 */
export async function distributeTables(
  db: Kysely<unknown>,
  t: Tables,
  lockKey: string,
  citus: CitusOptions,
): Promise<void> {
  const { rows } = await sql<{
    n: number;
  }>`select count(*)::int as n from pg_extension where extname = 'citus'`.execute(db);
  if (rows[0]?.n !== 1) {
    throw new Error(
      'webhook-inbox: option citus is set, but the database has no citus extension: connect `db` to the Citus coordinator (create extension citus there and on every worker), or remove `citus`',
    );
  }
  await db.transaction().execute(async (tx) => {
    await sql`select pg_advisory_xact_lock(hashtext(${lockKey}))`.execute(tx);
    const first = citus.colocateWith ?? 'none';
    for (const [table, column, colocate] of [
      [t.events, 'stream', first],
      [t.keys, 'stream', t.events],
      [t.gaps, 'stream', t.events],
      [t.groups, 'group_key', t.events],
    ]) {
      await sql`select create_distributed_table(${table}, ${column}, colocate_with => ${colocate})
                 where not exists (select 1 from pg_dist_partition where logicalrelid = ${table}::regclass)`.execute(
        tx,
      );
    }
  });
}
