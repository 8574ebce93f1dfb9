import { type Kysely, sql } from 'kysely';

export interface MigrationPlan {
  /** What errors start with: `webhook-inbox`, `webhook-inbox/sender`. */
  readonly label: string;
  readonly schema: string;
  /** The qualified, quoted ledger table. */
  readonly ledger: string;
  readonly lockKey: string;
  readonly migrations: ReadonlyArray<readonly [name: string, sql: () => string]>;
}

/** Runs what the ledger lacks in one transaction under an advisory lock (not Kysely's Migrator). */
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

export interface LedgerRow {
  readonly name: string;
}

/** Refuses the ledger of an unreleased version: it names a migration unknown here, lacking one shipped. */
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
