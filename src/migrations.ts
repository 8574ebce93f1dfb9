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
  return runMigrations(db, {
    label: 'webhook-inbox',
    schema: tables.schema,
    ledger: tables.fn('migrations'),
    lockKey: `webhook-inbox:${tables.schema}.${tables.prefix}`,
    migrations: migrations.map(([name, up]) => [name, () => up(tables)] as const),
  });
}

/**
 * The migration runner behind `migrateToLatest` (and the sender's outbox): creates the
 * schema and the ledger table if needed and runs what the ledger lacks, in order, in one
 * transaction under a transaction-scoped advisory lock on `lockKey`.
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
