import { type Kysely, sql } from 'kysely';
import { type CitusOptions, distributeTables } from './citus.js';
import {
  type LedgerRow,
  type MigrationPlan,
  refuseForeignLedger,
  runMigrations,
} from './migration-runner.js';
import { schema } from './migrations/0001-schema.js';
import { type FunctionName, functionDefinitions } from './sql/functions.js';
import type { Queryable, Tables } from './sql/tables.js';

/** A shipped migration: its own DDL, and the functions it creates (src/db/sql/functions.ts). */
export interface InboxMigration {
  readonly name: string;
  /** Tables, indexes, constraints; and what a function's change needs first (a DROP FUNCTION). */
  readonly up: (t: Tables) => string;
  /** Its functions with the digests of their text (test/sql-functions-match-migrations.test.ts). */
  readonly functions: { readonly [F in FunctionName]?: string };
}

/** In order: folded into 0001 until the first release, then append-only (docs/versioning.md). */
export const inboxMigrations: readonly InboxMigration[] = [
  {
    name: '0001_schema',
    up: schema,
    functions: {
      claim: '816d4eded4037b49',
      claim_many: '8220683412dafa2b',
      claim_latest: '2b6420095b224a64',
      latest_check: '28a29950d06780cc',
      take_next: '0bc913365e7d9ff2',
      take_pending: 'c441837d49da399b',
      take_grouped: '9f7d5716b63b92a9',
      take_turn: '85bd37eb13c61f6e',
      advance: '77f5a0d7ed627a88',
      fail: '9c881ef89360517b',
      sweep: '79cd437ce4c4d443',
    },
  },
];

export function migrationSql(migration: InboxMigration, t: Tables): string {
  const functions = (Object.keys(migration.functions) as FunctionName[]).map((name) =>
    functionDefinitions[name](t),
  );
  return [migration.up(t), ...functions].join('');
}

/** The shipped migrations' names and SQL, as functions of the table names, for users' own tools. */
export const migrations: ReadonlyArray<readonly [name: string, up: (t: Tables) => string]> =
  inboxMigrations.map((m) => [m.name, (t: Tables) => migrationSql(m, t)] as const);

/** Runs the shipped migrations in one transaction under a per-schema lock, then Citus distribution. */
export async function migrateToLatest(
  db: Kysely<unknown>,
  tables: Tables,
  citus?: CitusOptions,
): Promise<string[]> {
  const plan = inboxPlan(tables);
  const ran = await runMigrations(db, plan);
  if (citus) await distributeTables(db, tables, plan.lockKey, citus);
  return ran;
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

/** The migrations a database lacks, without running anything (`webhook-inbox migrate --check`, `--sql`). */
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

/** What `migrateToLatest` would run for `pending`, as one psql script; empty when nothing is pending. */
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
