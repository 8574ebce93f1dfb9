/**
 * Today's SQL is readable in one place (src/db/sql/, each function beside its caller) and history
 * lives in the frozen migrations. This proves they agree: a freshly migrated schema holds
 * exactly the functions of src/db/sql/functions.ts, with exactly today's definitions. A change to
 * a function without a migration that ships it fails here.
 */
import { type Kysely, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { functionDefinitions } from '../src/db/sql/functions.js';
import { createInbox } from '../src/index.js';
import { targets } from './support/databases.js';

async function definitions(db: Kysely<any>, schema: string) {
  // Overloads of one name (the claim's two) ordered by their arguments: an order both reads agree on.
  const { rows } = await sql<{ name: string; definition: string }>`
    select p.proname as name, pg_get_functiondef(p.oid) as definition
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace
     where n.nspname = ${schema}
     order by p.proname, pg_get_function_identity_arguments(p.oid)`.execute(db);
  return rows;
}

describe.each(targets)('SQL functions on $name', (target) => {
  it('a migrated schema holds exactly the current definitions', async () => {
    const t = await target.open();
    const inbox = createInbox({ db: t.db, schema: t.schema, sweepIntervalMs: 0, handle: () => {} });
    try {
      const db = await inbox.kysely();
      const migrated = await definitions(db, t.schema);
      expect(migrated.map((r) => r.name)).toEqual(functionDefinitions.map(([name]) => name).sort());
      // Create today's text again over the migrated one: nothing may change.
      for (const [, define] of functionDefinitions) await sql.raw(define(inbox.tables)).execute(db);
      expect(await definitions(db, t.schema)).toEqual(migrated);
    } finally {
      await inbox.close();
      await t.close();
    }
  });
});
