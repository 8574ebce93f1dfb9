import { type Kysely, sql } from 'kysely';
import { runMigrations } from './migration-runner.js';
import { baseline } from './migrations/0001-baseline.js';
import { release0_2 } from './migrations/0002-release-0-2.js';
import { deadLetterCauses } from './migrations/0003-dead-letter-causes.js';
import { deferredAcks } from './migrations/0004-deferred-acks.js';
import { capacity } from './migrations/0005-capacity.js';
import { bufferReads } from './migrations/0006-buffer-reads.js';
import { sweepWalk } from './migrations/0007-sweep-walk.js';
import type { Tables } from './sql/tables.js';

/**
 * The shipped migrations. Append-only: a released migration is never edited; a change is a
 * new, higher-numbered migration (functions are created again with CREATE OR REPLACE, from
 * their current definition in src/db/sql/, frozen into the migration's own text: the whole new
 * text, never a patch of another migration's).
 * Each is a function of the table names, because schema and prefix are the user's choice.
 * One migration per released version: what was built between two releases is squashed into
 * one before the release (pg-boss and River ship theirs so).
 */
export const migrations: ReadonlyArray<readonly [name: string, up: (t: Tables) => string]> = [
  ['0001_baseline', baseline], // 0.1.0
  ['0002_release_0_2', release0_2], // 0.2.0
  ['0003_dead_letter_causes', deadLetterCauses], // 0.2.0's first after the squash
  ['0004_deferred_acks', deferredAcks], // 0.2.0
  ['0005_capacity', capacity], // 0.2.0
  ['0006_buffer_reads', bufferReads], // 0.2.0
  ['0007_sweep_walk', sweepWalk], // 0.2.0
];

/**
 * Names an unreleased commit of `main` wrote into the ledger before they were squashed into
 * 0002_release_0_2. A schema that lists one is in a state no release left it in, and running
 * 0002 over it would fail half-way; it is refused with the fix instead.
 */
export const retiredMigrations: readonly string[] = [
  '0003_hostile_senders',
  '0004_state_machine',
  '0005_latest_wins',
  '0006_held_bound',
  '0007_pending_batches',
  '0008_row_at_commit',
  '0009_ordered_row_at_commit',
  '0010_mark_at_commit',
  '0011_id_lock',
  '0012_unchecked_states',
  '0012_lean_event_writes',
  '0013_ignored_events',
];

function refuseRetired(tables: Tables, applied: ReadonlySet<string>): string | undefined {
  const found = retiredMigrations.find((name) => applied.has(name));
  if (found === undefined) return undefined;
  const ledger = tables.fn('migrations');
  const schema = `"${tables.schema.replace(/"/g, '""')}"`;
  return (
    `webhook-inbox: schema ${schema} was migrated by an unreleased development version (its ledger ${ledger} ` +
    `lists ${found}); migrations 0003 to 0013 were squashed into 0002_release_0_2 for 0.2.0, so it cannot be ` +
    `upgraded step by step. Fix: if the ledger lists 0013_ignored_events, the schema is already 0.2.0's: ` +
    `run \`delete from ${ledger} where name > '0001'; insert into ${ledger} (name, timestamp) values ` +
    `('0002_release_0_2', now()::text)\`. Otherwise drop it (\`drop schema ${schema} cascade\`, or use ` +
    'another `schema`) and let the inbox create it again.'
  );
}

/**
 * Runs the shipped migrations up to the latest, in one transaction, under an advisory lock
 * per schema and prefix: any number of instances may start at once. Returns the names it ran.
 */
export async function migrateToLatest(db: Kysely<any>, tables: Tables): Promise<string[]> {
  return runMigrations(db, inboxPlan(tables));
}

/** What a run of the migrations needs: where the ledger is, the lock, the migrations in order. */
type MigrationPlan = Parameters<typeof runMigrations>[1];

function inboxPlan(tables: Tables): MigrationPlan {
  return {
    label: 'webhook-inbox',
    schema: tables.schema,
    ledger: tables.fn('migrations'),
    lockKey: `webhook-inbox:${tables.schema}.${tables.prefix}`,
    migrations: migrations.map(([name, up]) => [name, () => up(tables)] as const),
    refuse: (applied) => refuseRetired(tables, applied),
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
