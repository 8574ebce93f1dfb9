import { type Kysely, sql } from 'kysely';

/**
 * The migration runner behind the inbox's `migrateToLatest` (src/db/migrations.ts) and the sender's
 * outbox: creates the schema and the ledger table if needed and runs what the ledger lacks, in
 * order, in one transaction under a transaction-scoped advisory lock on `lockKey`.
 *
 * Why not Kysely's Migrator: its existence checks introspect every table of every schema in
 * the database, and fail ("schema … does not exist") when another schema is dropped at that
 * moment — seen when test files, or tenants, come and go in parallel. This needs nothing but
 * its own table, which keeps Kysely's shape (`name`, `timestamp`).
 */
export async function runMigrations(
  db: Kysely<any>,
  plan: {
    label: string;
    schema: string;
    /** The qualified, quoted ledger table. */
    ledger: string;
    lockKey: string;
    migrations: ReadonlyArray<readonly [name: string, sql: () => string]>;
    /** Given the names the ledger lists: why this schema must not be migrated, if it must not. */
    refuse?: (applied: ReadonlySet<string>) => string | undefined;
  },
): Promise<string[]> {
  const { ledger } = plan;
  return db.transaction().execute(async (tx) => {
    await sql`select pg_advisory_xact_lock(hashtext(${plan.lockKey}))`.execute(tx);
    await sql.raw(`create schema if not exists "${plan.schema.replace(/"/g, '""')}"`).execute(tx);
    await sql
      .raw(
        `create table if not exists ${ledger} (name varchar(255) primary key, timestamp varchar(255) not null)`,
      )
      .execute(tx);
    const done = await sql<{ name: string }>`select name from ${sql.raw(ledger)}`.execute(tx);
    const applied = new Set(done.rows.map((r) => r.name));
    const refused = plan.refuse?.(applied);
    if (refused !== undefined) throw new Error(refused);
    const ran: string[] = [];
    for (const [name, up] of plan.migrations) {
      if (applied.has(name)) continue;
      try {
        await sql.raw(up()).execute(tx);
      } catch (err) {
        throw new Error(`${plan.label}: migration ${name} failed`, { cause: err });
      }
      const stamp = new Date().toISOString();
      await sql`insert into ${sql.raw(ledger)} (name, timestamp) values (${name}, ${stamp})`.execute(tx);
      ran.push(name);
    }
    return ran;
  });
}
