import { type Kysely, sql } from 'kysely';
import type { Tables } from './sql/tables.js';

/** Option `citus` (docs/citus.md): the inbox's tables distributed on a Citus cluster. */
export interface CitusOptions {
  /**
   * A distributed table of yours (`'orders'`, `'public.orders'`) whose distribution column holds the
   * events' keys: the inbox's rows of a key land on the shard of that table's rows of the same value.
   * Omitted: the inbox's tables are colocated with each other only.
   */
  readonly colocateWith?: string;
}

/**
 * Distributes the events, keys and gaps tables by their stream and the groups table by its group,
 * colocated, once (a table already distributed is left as it is), under the migrations' lock so two instances starting together
 * distribute each table once. The functions stay on the coordinator, where every claim runs: a claim
 * reads an id's row in any stream and takes the id's advisory lock, which on one shard's worker
 * would miss the other shards' rows and locks (docs/citus.md, "Where the claim runs").
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
