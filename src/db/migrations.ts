import { type Kysely, sql } from 'kysely';
import {
  type LedgerRow,
  type MigrationPlan,
  refuseForeignLedger,
  runMigrations,
} from './migration-runner.js';
import { schema } from './migrations/0001-schema.js';
import { type FunctionName, functionDefinitions } from './sql/functions.js';
import type { Queryable, Tables } from './sql/tables.js';

/**
 * A shipped migration: its own DDL, and the functions it creates from their one definition
 * (src/db/sql/functions.ts), after the DDL.
 */
export interface InboxMigration {
  readonly name: string;
  /** Tables, indexes, constraints; and what a function's change needs first (a DROP FUNCTION). */
  readonly up: (t: Tables) => string;
  /**
   * The functions it creates, each with the digest of the text it was written for (the first 16
   * hex digits of the SHA-256 of the function's text for the default schema, `webhook_inbox`, and
   * no prefix). A database that ran it runs that text until a later migration creates the
   * function again, so the last migration that lists a function must carry the digest of its
   * current text: test/sql-functions-match-migrations.test.ts fails until it does.
   */
  readonly functions: { readonly [F in FunctionName]?: string };
}

/**
 * The shipped migrations, in order (docs/versioning.md). Until the first release, every schema
 * change is folded into 0001. From it on, they are append-only: a change is a new,
 * higher-numbered migration, and a released one's DDL is never edited. A function changed
 * later is listed again, with its new digest, by the migration that ships the change: a
 * database that ran the earlier migrations gets its current text there, and a new one, which
 * got it from the first, gets it again.
 */
export const inboxMigrations: readonly InboxMigration[] = [
  {
    name: '0001_schema',
    up: schema,
    functions: {
      claim: 'c17fd140de2d557e',
      claim_many: '8b6e74431111d5e2',
      claim_latest: 'd8e65f0c2669fc99',
      latest_check: '40ca6e2e2548b0d7',
      take_next: 'f3ec12f77a738fec',
      take_pending: '5b2a79b62a454133',
      take_turn: '32d154ddb2431ee1',
      advance: '0af02c7ad1603752',
      fail: '31544e28681d6d0c',
      sweep: '8a75b2810ae7cded',
    },
  },
];

/** The whole SQL of a migration for one inbox's tables: its DDL, then its functions. */
export function migrationSql(migration: InboxMigration, t: Tables): string {
  const functions = (Object.keys(migration.functions) as FunctionName[]).map((name) =>
    functionDefinitions[name](t),
  );
  return [migration.up(t), ...functions].join('');
}

/**
 * The shipped migrations as each one's name and SQL for an inbox's tables (`inbox.tables`), for
 * those who run them with a tool of their own. Each is a function of the table names, because
 * schema and prefix are the user's choice.
 */
export const migrations: ReadonlyArray<readonly [name: string, up: (t: Tables) => string]> =
  inboxMigrations.map((m) => [m.name, (t: Tables) => migrationSql(m, t)] as const);

/**
 * Runs the shipped migrations up to the latest, in one transaction, under an advisory lock
 * per schema and prefix: any number of instances may start at once. Returns the names it ran.
 * A schema an unreleased version migrated is refused with the fix (`refuseForeignLedger`).
 */
export async function migrateToLatest(db: Kysely<unknown>, tables: Tables): Promise<string[]> {
  return runMigrations(db, inboxPlan(tables));
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
 * none when the schema is new): what `webhook-inbox migrate --check` and `--sql` report. Throws
 * as `migrateToLatest` would for a schema an unreleased version migrated.
 */
export async function pendingMigrations(db: Queryable, tables: Tables): Promise<string[]> {
  const plan = inboxPlan(tables);
  const { rows } = await sql<{
    ledger: string | null;
  }>`select to_regclass(${plan.ledger})::text as ledger`.execute(db);
  const applied = new Set<string>();
  if (rows[0]?.ledger) {
    const done = await sql<LedgerRow>`select name from ${sql.raw(plan.ledger)}`.execute(db);
    for (const r of done.rows) applied.add(r.name);
  }
  refuseForeignLedger(plan, applied);
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
