/**
 * Each PL/pgSQL function's text is in one place, beside its caller in src/db/sql/, and the
 * migrations create the functions from there (src/db/migrations.ts). This proves both halves:
 * a freshly migrated schema holds exactly the functions of src/db/sql/functions.ts, one each,
 * with exactly their current definitions; and the last migration that creates each function
 * records the digest of its current text, so a function edited without a migration that ships
 * it (folded into 0001 before the first release, a new migration after it: docs/versioning.md)
 * fails here, where a database migrated earlier would go on running the old text.
 */
import { createHash } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { inboxMigrations } from '../src/db/migrations.js';
import { type FunctionName, functionDefinitions } from '../src/db/sql/functions.js';
import { createTables } from '../src/db/sql/tables.js';
import { createInbox } from '../src/index.js';
import { targets } from './support/databases.js';

const names = Object.keys(functionDefinitions) as FunctionName[];

async function definitions(db: Kysely<unknown>, schema: string) {
  // Overloads of one name, should any exist, ordered by their arguments: an order both reads agree on.
  const { rows } = await sql<{ name: string; definition: string }>`
    select p.proname as name, pg_get_functiondef(p.oid) as definition
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace
     where n.nspname = ${schema}
     order by p.proname, pg_get_function_identity_arguments(p.oid)`.execute(db);
  return rows;
}

describe.each(targets)('SQL functions on $name', (target) => {
  it('a migrated schema holds exactly the current definitions, one of each', async () => {
    const t = await target.open();
    const inbox = createInbox({ db: t.db, schema: t.schema, sweepIntervalMs: 0, handle: () => {} });
    try {
      const db = await inbox.kysely();
      const migrated = await definitions(db, t.schema);
      expect(migrated.map((r) => r.name)).toEqual([...names].sort());
      // Create today's text again over the migrated one: nothing may change.
      for (const name of names) await sql.raw(functionDefinitions[name](inbox.tables)).execute(db);
      expect(await definitions(db, t.schema)).toEqual(migrated);
    } finally {
      await inbox.close();
      await t.close();
    }
  });
});

describe('the migrations and the current texts', () => {
  it('the last migration that creates each function records the digest of its current text', () => {
    const t = createTables('webhook_inbox', '');
    const digest = (name: FunctionName) =>
      createHash('sha256').update(functionDefinitions[name](t)).digest('hex').slice(0, 16);
    const recorded: Record<string, string | undefined> = {};
    const current: Record<string, string> = {};
    for (const name of names) {
      const last = inboxMigrations.findLast((m) => m.functions[name] !== undefined);
      recorded[name] = last && `${last.name}: ${last.functions[name]}`;
      current[name] = `${last?.name ?? '(none creates it)'}: ${digest(name)}`;
    }
    expect(
      recorded,
      'a function changed without a migration that ships it: before the first release, write its new ' +
        'digest in 0001_schema; after it, list the function in a new migration with it (docs/versioning.md)',
    ).toEqual(current);
  });
});
