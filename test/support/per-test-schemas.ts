import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { createInbox } from '../../src/index.js';
import { type Target, type TargetDb, uniqueName } from './databases.js';

/**
 * One database per describe block (a PGlite instance takes seconds to start on a busy box),
 * and fresh schemas per test, dropped after it. `current()` is this test's.
 */
export function perTestSchemas(target: Target): () => TargetDb {
  let shared: TargetDb;
  let current: TargetDb | undefined;
  beforeAll(async () => {
    shared = await target.open();
  });
  afterAll(async () => {
    await shared?.close();
  });
  afterEach(async () => {
    if (!current) return;
    const { schema, appSchema } = current;
    current = undefined;
    const dropper = createInbox({ db: shared.db, handle: () => {}, migrate: false, sweepIntervalMs: 0 });
    await sql`drop schema if exists ${sql.id(schema)}, ${sql.id(appSchema)} cascade`.execute(
      await dropper.kysely(),
    );
    await dropper.close();
  });
  return () => {
    current ??= { ...shared, schema: uniqueName('wi'), appSchema: uniqueName('app'), close: async () => {} };
    return current;
  };
}
