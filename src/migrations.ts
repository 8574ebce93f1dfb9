import { type Kysely, sql } from 'kysely';
import { baseline } from './migrations/0001-baseline.js';
import { hostileSenders } from './migrations/0003-hostile-senders.js';
import { stateMachine } from './migrations/0004-state-machine.js';
import { latestWins } from './migrations/0005-latest-wins.js';
import { heldBound } from './migrations/0006-held-bound.js';
import { pendingBatches } from './migrations/0007-pending-batches.js';
import { rowAtCommit } from './migrations/0008-row-at-commit.js';
import { markAtCommit } from './migrations/0010-mark-at-commit.js';
import { leanEventWrites } from './migrations/0012-lean-event-writes.js';
import { ignoredEvents } from './migrations/0013-ignored-events.js';
import { deadLetterCauses } from './migrations/0014-dead-letter-causes.js';
import type { Tables } from './sql/tables.js';

/**
 * The shipped migrations. Append-only: a released migration is never edited; a change is a
 * new, higher-numbered migration (functions are created again with CREATE OR REPLACE, from
 * their current definition in src/sql/, frozen into the migration's own text).
 * Each is a function of the table names, because schema and prefix are the user's choice.
 * Numbers missing from the list (0002, 0009, 0011) were folded into a neighbour before any
 * release: no database was ever meant to stop between them.
 */
export const migrations: ReadonlyArray<readonly [name: string, up: (t: Tables) => string]> = [
  ['0001_baseline', baseline],
  ['0003_hostile_senders', hostileSenders],
  ['0004_state_machine', stateMachine],
  ['0005_latest_wins', latestWins],
  ['0006_held_bound', heldBound],
  ['0007_pending_batches', pendingBatches],
  ['0008_row_at_commit', rowAtCommit],
  ['0010_mark_at_commit', markAtCommit],
  ['0012_lean_event_writes', leanEventWrites],
  ['0013_ignored_events', ignoredEvents],
  ['0014_dead_letter_causes', deadLetterCauses],
];

/**
 * Runs the shipped migrations up to the latest, in one transaction, under an advisory lock
 * per schema and prefix: any number of instances may start at once. Returns the names it ran.
 *
 * Why not Kysely's Migrator: its existence checks introspect every table of every schema in
 * the database, and fail ("schema … does not exist") when another schema is dropped at that
 * moment — seen when test files, or tenants, come and go in parallel. This needs nothing but
 * its own table, which keeps Kysely's shape (`name`, `timestamp`).
 */
export async function migrateToLatest(db: Kysely<any>, tables: Tables): Promise<string[]> {
  return runMigrations(db, inboxPlan(tables));
}

/** What a run of the migrations needs: where the ledger is, the lock, the migrations in order. */
interface MigrationPlan {
  label: string;
  schema: string;
  /** The qualified, quoted ledger table. */
  ledger: string;
  lockKey: string;
  migrations: ReadonlyArray<readonly [name: string, sql: () => string]>;
}

function inboxPlan(tables: Tables): MigrationPlan {
  return {
    label: 'webhook-inbox',
    schema: tables.schema,
    ledger: tables.fn('migrations'),
    lockKey: `webhook-inbox:${tables.schema}.${tables.prefix}`,
    migrations: migrations.map(([name, up]) => [name, () => up(tables)] as const),
  };
}

/**
 * The migrations a database lacks, in order, without running anything (a read of the ledger,
 * none when the schema is new): what `webhook-inbox migrate --check` and `--sql` report.
 */
export async function pendingMigrations(db: Kysely<any>, tables: Tables): Promise<string[]> {
  const plan = inboxPlan(tables);
  const { rows } = await sql<{
    ledger: string | null;
  }>`select to_regclass(${plan.ledger})::text as ledger`.execute(db);
  const applied = new Set<string>();
  if (rows[0]?.ledger) {
    const done = await sql<{ name: string }>`select name from ${sql.raw(plan.ledger)}`.execute(db);
    for (const r of done.rows) applied.add(r.name);
  }
  return plan.migrations.map(([name]) => name).filter((name) => !applied.has(name));
}

/**
 * The SQL `migrateToLatest` would run for the migrations named (`pendingMigrations`), as one
 * script a DBA can review and run with psql: one transaction, the same advisory lock, the
 * schema and ledger created if missing, each migration followed by its ledger row, so that the
 * application finds them applied. Empty when nothing is pending.
 */
export function migrationScript(tables: Tables, pending: readonly string[]): string {
  if (pending.length === 0) return '';
  const plan = inboxPlan(tables);
  const literal = (text: string) => `'${text.replace(/'/g, "''")}'`;
  const parts = [
    `-- webhook-inbox: ${pending.length} pending migration${pending.length === 1 ? '' : 's'} for schema ${plan.schema}${tables.prefix ? `, table prefix ${tables.prefix}` : ''}`,
    'begin;',
    `select pg_advisory_xact_lock(hashtext(${literal(plan.lockKey)}));`,
    `create schema if not exists "${plan.schema.replace(/"/g, '""')}";`,
    `create table if not exists ${plan.ledger} (name varchar(255) primary key, timestamp varchar(255) not null);`,
  ];
  for (const [name, up] of plan.migrations) {
    if (!pending.includes(name)) continue;
    parts.push(
      `\n-- migration ${name}`,
      up().trim(),
      `insert into ${plan.ledger} (name, timestamp) values (${literal(name)}, now()::text);`,
    );
  }
  parts.push('commit;');
  return `${parts.join('\n')}\n`;
}

/**
 * The migration runner behind `migrateToLatest` (and the sender's outbox): creates the
 * schema and the ledger table if needed and runs what the ledger lacks, in order, in one
 * transaction under a transaction-scoped advisory lock on `lockKey`.
 */
export async function runMigrations(db: Kysely<any>, plan: MigrationPlan): Promise<string[]> {
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
