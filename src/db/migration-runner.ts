import { type Kysely, sql } from 'kysely';

/** What a run of the migrations needs: where the ledger is, the lock, the migrations in order. */
export interface MigrationPlan {
  /** What errors start with: `webhook-inbox`, `webhook-inbox/sender`. */
  readonly label: string;
  readonly schema: string;
  /** The qualified, quoted ledger table. */
  readonly ledger: string;
  readonly lockKey: string;
  readonly migrations: ReadonlyArray<readonly [name: string, sql: () => string]>;
}

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
export async function runMigrations(db: Kysely<unknown>, plan: MigrationPlan): Promise<string[]> {
  const { ledger } = plan;
  return db.transaction().execute(async (tx) => {
    await sql`select pg_advisory_xact_lock(hashtext(${plan.lockKey}))`.execute(tx);
    await sql.raw(`create schema if not exists "${plan.schema.replace(/"/g, '""')}"`).execute(tx);
    await sql
      .raw(
        `create table if not exists ${ledger} (name varchar(255) primary key, timestamp varchar(255) not null)`,
      )
      .execute(tx);
    const done = await sql<LedgerRow>`select name from ${sql.raw(ledger)}`.execute(tx);
    const applied = new Set(done.rows.map((r) => r.name));
    refuseForeignLedger(plan, applied);
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

/** A row of the ledger, as the runner reads it. */
export interface LedgerRow {
  readonly name: string;
}

/**
 * Throws when the ledger says the schema was migrated along another line than the shipped
 * migrations: it lists a migration this version does not ship while it lacks one this version
 * does. Migrations are append-only, so a later version's ledger holds every name an earlier one
 * ships (an earlier version beside a later one, as in a rolling deploy, finds nothing to run);
 * a schema left by an unreleased commit, whose migrations were folded into one before a release,
 * lists names no release has. Running the shipped migrations over it would fail half-way, or
 * worse, succeed on a schema that is not the one they were written for.
 */
export function refuseForeignLedger(plan: MigrationPlan, applied: ReadonlySet<string>): void {
  const shipped = new Set(plan.migrations.map(([name]) => name));
  const foreign = [...applied].filter((name) => !shipped.has(name)).sort();
  const missing = [...shipped].filter((name) => !applied.has(name));
  if (foreign.length === 0 || missing.length === 0) return;
  const schema = `"${plan.schema.replace(/"/g, '""')}"`;
  throw new Error(
    `${plan.label}: schema ${schema} was migrated by a version this one does not know: its ledger ` +
      `${plan.ledger} lists ${foreign.join(', ')}, which this version does not ship, and lacks ` +
      `${missing.join(', ')}. A schema made by an unreleased (development) version cannot be brought ` +
      `to a release step by step. Fix: drop it (\`drop schema ${schema} cascade\`) and let ${plan.label} ` +
      'create it again, or use another `schema`.',
  );
}
