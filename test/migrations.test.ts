import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { runMigrations } from '../src/db/migration-runner.js';
import { createTables } from '../src/db/sql/tables.js';
import { createInbox, migrations } from '../src/index.js';
import { cli } from './support/cli.js';
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

describe.runIf(postgresTarget)('deploy gates: migrate --sql and migrate --check', () => {
  it('--sql prints the pending SQL (nothing on a current database), runnable by psql; --check exits 1, then 0', async () => {
    const t = await postgresTarget!.open();
    const S = ['--schema', t.schema];
    try {
      const pending = await cli(['migrate', '--check', ...S, '--json']);
      expect(pending.code).toBe(1);
      expect(pending.json).toMatchObject({ current: false, pending: migrations.map(([name]) => name) });
      const script = await cli(['migrate', '--sql', ...S]);
      expect(script.code).toBe(0);
      expect(script.stdout).toMatch(/^-- webhook-inbox: \d+ pending migrations for schema /);
      // Nothing ran: the schema is still missing.
      expect((await cli(['migrate', '--check', ...S])).code).toBe(1);
      // The DBA runs it (one multi-statement query, as psql -f does); the application then finds it current.
      await (t.db as import('pg').Pool).query(script.stdout);
      const current = await cli(['migrate', '--check', ...S]);
      expect([current.code, current.stdout.trim()]).toEqual([0, `schema ${t.schema} is up to date`]);
      expect((await cli(['migrate', '--sql', ...S])).stdout).toBe('');
      const inbox = createInbox({
        db: t.db,
        schema: t.schema,
        migrate: false,
        sweepIntervalMs: 0,
        handle: () => 1,
      });
      try {
        const outcome = await inbox.receive({
          headers: { 'idempotency-key': 'e-1' },
          rawBody: Buffer.from('{}'),
        });
        expect(outcome.kind).toBe('processed');
      } finally {
        await inbox.close();
      }
      expect((await cli(['migrate', '--sql', '--check', ...S])).code).toBe(2);
    } finally {
      await t.close();
    }
  });
});

describe.runIf(postgresTarget)('a 0.1.0 database upgraded by 0002_release_0_2', () => {
  // The longest prefix options allow: PostgreSQL truncated the names it gave the old CHECKs.
  const prefix = `p${'x'.repeat(39)}`;

  it('keeps every row, repairs what 0.1.0 stranded, refuses a status outside the list as before, and drops the trigger', async () => {
    const t = await postgresTarget!.open();
    const tables = createTables(t.schema, prefix);
    const before = createInbox({
      db: t.db,
      schema: t.schema,
      tablePrefix: prefix,
      migrate: false,
      handle: () => {},
    });
    try {
      const db = await before.kysely();
      // The schema as a 0.1.0 instance left it: the baseline alone.
      await runMigrations(db, {
        label: 'webhook-inbox',
        schema: t.schema,
        ledger: tables.fn('migrations'),
        lockKey: `webhook-inbox:${t.schema}.${prefix}`,
        migrations: migrations
          .filter(([name]) => name === '0001_baseline')
          .map(([name, up]) => [name, () => up(tables)] as const),
      });
      await sql
        .raw(
          `insert into ${tables.events} (source, id, key, seq, body_hash, status) values
             ('default', 'a', null, null, 'h', 'processed'), ('default', 'b', 'k', 2, 'h', 'held'),
             ('default', 'c', null, null, 'h', 'dead'), ('default', 'd', 'j', 1, 'h', 'held'),
             ('default', 'e', 'k', 3, 'h', 'held'), ('default', 'f', 'k', 3, 'h', 'pending');
           insert into ${tables.keys} (source, key, next_seq, state, blocked_seq, blocked_reason)
             values ('default', 'k', 1, 'blocked', 1, 'gap'), ('default', 'j', 2, 'open', null, null);
           insert into ${tables.gaps} (source, key, from_seq, to_seq, reason) values ('default', 'j', 2, 2, 'timeout');`,
        )
        .execute(db);
    } finally {
      await before.close();
    }

    const inbox = createInbox({
      db: t.db,
      schema: t.schema,
      tablePrefix: prefix,
      sweepIntervalMs: 0,
      handle: () => ({ ok: 1 }),
    });
    try {
      const db = await inbox.kysely();
      await inbox.ready();
      const { rows } = await sql<{
        id: string;
        status: string;
        dead_reason: string | null;
      }>`select id, status, dead_reason from ${sql.raw(tables.events)} order by id`.execute(db);
      // 0.1.0 could leave a row waiting below its cursor (d) and two waiting at one seq (e, f):
      // dead-lettered, late and seq-taken; its gap ahead of a cursor is gone.
      expect(rows).toEqual([
        { id: 'a', status: 'processed', dead_reason: null },
        { id: 'b', status: 'held', dead_reason: null },
        { id: 'c', status: 'dead', dead_reason: null },
        { id: 'd', status: 'dead', dead_reason: 'late' },
        { id: 'e', status: 'held', dead_reason: null },
        { id: 'f', status: 'dead', dead_reason: 'seq-taken' },
      ]);
      const gaps = await sql<{
        n: number;
      }>`select count(*)::int as n from ${sql.raw(tables.gaps)} where key = 'j'`.execute(db);
      expect(gaps.rows[0].n).toBe(0);
      // The guards hold: a value outside each list is refused (23514), one inside is taken.
      const refused = async (text: string) =>
        expect(sql.raw(text).execute(db)).rejects.toMatchObject({ code: '23514' });
      await refused(
        `insert into ${tables.events} (source, id, body_hash, status) values ('default', 'z', 'h', 'done')`,
      );
      await sql
        .raw(
          `insert into ${tables.events} (source, id, body_hash, status) values ('default', 'y', 'h', 'ignored')`,
        )
        .execute(db);
      await refused(`update ${tables.keys} set state = 'closed'`);
      await refused(`update ${tables.keys} set blocked_reason = 'late'`);
      await refused(
        `insert into ${tables.gaps} (source, key, from_seq, to_seq, reason) values ('default', 'k', 1, 1, 'lost')`,
      );
      await sql
        .raw(
          `insert into ${tables.gaps} (source, key, from_seq, to_seq, reason) values ('default', 'k', 1, 1, 'skip')`,
        )
        .execute(db);
      // Each list is stored folded: a constant text[] and nothing a write has to evaluate.
      const checks = await sql<{ def: string; folded: boolean }>`
        select pg_get_constraintdef(c.oid) as def,
               c.conbin::text like '%{CONST :consttype 1009 %' and c.conbin::text not like '%{ARRAYEXPR%'
                 and c.conbin::text not like '%{FUNCEXPR%' as folded
          from pg_constraint c
         where c.conrelid in (${tables.events}::regclass, ${tables.keys}::regclass, ${tables.gaps}::regclass)
           and c.contype = 'c' and pg_get_constraintdef(c.oid) like '%ANY%'`.execute(db);
      expect(checks.rows).toHaveLength(4);
      expect(checks.rows.filter((r) => !r.folded)).toEqual([]);
      // No trigger is left on the events table, and a new event is still applied.
      const triggers = await sql<{ n: number }>`select count(*)::int as n from pg_trigger
        where tgrelid = ${tables.events}::regclass and not tgisinternal`.execute(db);
      expect(triggers.rows[0].n).toBe(0);
      expect(
        (await inbox.receive({ headers: { 'idempotency-key': 'new' }, rawBody: Buffer.from('x') })).kind,
      ).toBe('processed');
    } finally {
      await inbox.close();
      await t.close();
    }
  });
});

describe.runIf(postgresTarget)('a schema an unreleased commit migrated', () => {
  it('is refused with the fix, and nothing of 0002 runs', async () => {
    const t = await postgresTarget!.open();
    const tables = createTables(t.schema, '');
    const inbox = createInbox({ db: t.db, schema: t.schema, migrate: false, handle: () => {} });
    try {
      const db = await inbox.kysely();
      await runMigrations(db, {
        label: 'webhook-inbox',
        schema: t.schema,
        ledger: tables.fn('migrations'),
        lockKey: `webhook-inbox:${t.schema}.`,
        migrations: migrations
          .filter(([name]) => name === '0001_baseline')
          .map(([name, up]) => [name, () => up(tables)] as const),
      });
      await sql
        .raw(`insert into ${tables.fn('migrations')} (name, timestamp) values ('0004_state_machine', 'x')`)
        .execute(db);
      const refused = inbox.migrate();
      await expect(refused).rejects.toThrow(/lists 0004_state_machine.*0002_release_0_2.*Fix:.*drop schema/);
      const ledger = await sql<{
        name: string;
      }>`select name from ${sql.raw(tables.fn('migrations'))} order by name`.execute(db);
      expect(ledger.rows.map((r) => r.name)).toEqual(['0001_baseline', '0004_state_machine']);
    } finally {
      await inbox.close();
      await t.close();
    }
  });
});
