import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { createInbox, migrations } from '../src/index.js';
import { postgresTarget } from './support/databases.js';

describe.runIf(postgresTarget)('migrations on real Postgres', () => {
  it('five instances starting at once on a new schema migrate it once, and all serve', async () => {
    const t = await postgresTarget!.open();
    const inboxes = Array.from({ length: 5 }, () =>
      createInbox({ db: t.another(), schema: t.schema, sweepIntervalMs: 0, handle: () => ({ ok: 1 }) }),
    );
    try {
      await Promise.all(inboxes.map((i) => i.ready()));
      const db = await inboxes[0].kysely();
      const rows = await sql<{
        name: string;
      }>`select name from ${sql.table(`${t.schema}.migrations`)} order by name`.execute(db);
      expect(rows.rows.map((r) => r.name)).toEqual(migrations.map(([name]) => name));
      const outcomes = await Promise.all(
        inboxes.map((inbox, i) =>
          inbox.receive({ headers: { 'idempotency-key': `m${i}` }, rawBody: Buffer.from('x') }),
        ),
      );
      expect(outcomes.map((o) => o.kind)).toEqual(Array(5).fill('processed'));
      await inboxes[0].migrate(); // again: nothing to do, nothing breaks
    } finally {
      await Promise.all(inboxes.map((i) => i.close()));
      await t.close();
    }
  });
});
