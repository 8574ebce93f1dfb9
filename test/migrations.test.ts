import { type Kysely, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { createTables, type Tables } from '../src/db/sql/tables.js';
import { createInbox, migrations } from '../src/index.js';
import { cli } from './support/cli.js';
import { postgresTarget, targets } from './support/databases.js';

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
      expect(script.stdout).toMatch(/^-- webhook-inbox: 1 pending migration for schema /);
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

/** A schema with a ledger of its own, as some earlier run of the migrations left it. */
async function ledgerWith(db: Kysely<unknown>, tables: Tables, names: readonly string[], ddl = '') {
  await sql
    .raw(
      `create schema if not exists "${tables.schema}";
       create table ${tables.fn('migrations')} (name varchar(255) primary key, timestamp varchar(255) not null);
       ${ddl}
       insert into ${tables.fn('migrations')} (name, timestamp) values ${names.map((n) => `('${n}', 'x')`).join(', ')};`,
    )
    .execute(db);
}

async function ledger(db: Kysely<unknown>, tables: Tables): Promise<string[]> {
  const { rows } = await sql<{
    name: string;
  }>`select name from ${sql.raw(tables.fn('migrations'))} order by name`.execute(db);
  return rows.map((r) => r.name);
}

/** What unreleased commits wrote into the ledger before their migrations were folded into one. */
const UNRELEASED = [
  '0001_baseline',
  '0002_release_0_2',
  '0003_dead_letter_causes',
  '0004_deferred_acks',
  '0005_capacity',
  '0006_buffer_reads',
  '0007_sweep_walk',
];

describe.each(targets)('a schema an unreleased version migrated, on $name', (target) => {
  it('is refused at start with the fix, and nothing runs', async () => {
    const t = await target.open();
    const tables = createTables(t.schema, '');
    const inbox = createInbox({ db: t.db, schema: t.schema, migrate: false, handle: () => {} });
    try {
      const db = await inbox.kysely();
      // The tables as such a commit left them, which the shipped migration would meet half-way.
      await ledgerWith(db, tables, UNRELEASED, `create table ${tables.events} (source text);`);
      await expect(inbox.migrate()).rejects.toThrow(
        /lists 0001_baseline, 0002_release_0_2, .*0007_sweep_walk, which this version does not ship, and lacks 0001_schema\..*Fix: drop it \(`drop schema "[^"]+" cascade`\).*another `schema`/,
      );
      expect(await ledger(db, tables)).toEqual(UNRELEASED);
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from information_schema.columns
        where table_schema = ${t.schema} and table_name = 'events'`.execute(db);
      expect(rows[0].n).toBe(1);
    } finally {
      await inbox.close();
      await t.close();
    }
  });

  it("a later version's ledger (every shipped name, and more) is not: an earlier instance beside it starts", async () => {
    const t = await target.open();
    const tables = createTables(t.schema, '');
    const first = createInbox({ db: t.db, schema: t.schema, sweepIntervalMs: 0, handle: () => ({ ok: 1 }) });
    try {
      await first.ready();
      const db = await first.kysely();
      await sql
        .raw(
          `insert into ${tables.fn('migrations')} (name, timestamp) values ('9999_from_a_later_version', 'x')`,
        )
        .execute(db);
      expect(await first.migrate()).toBeUndefined();
      expect(
        (await first.receive({ headers: { 'idempotency-key': 'later' }, rawBody: Buffer.from('x') })).kind,
      ).toBe('processed');
      expect(await ledger(db, tables)).toEqual([
        ...migrations.map(([name]) => name),
        '9999_from_a_later_version',
      ]);
    } finally {
      await first.close();
      await t.close();
    }
  });
});

describe.runIf(postgresTarget)('migrate --check and --sql on a schema an unreleased version migrated', () => {
  it('refuse it with the fix, as the start does, and print no SQL', async () => {
    const t = await postgresTarget!.open();
    const tables = createTables(t.schema, '');
    const inbox = createInbox({ db: t.db, schema: t.schema, migrate: false, handle: () => {} });
    try {
      await ledgerWith(await inbox.kysely(), tables, UNRELEASED);
      for (const flag of ['--check', '--sql']) {
        const run = await cli(['migrate', flag, '--schema', t.schema]);
        expect(run.code, flag).not.toBe(0);
        expect(run.stdout, flag).toBe('');
        expect(run.stderr, flag).toMatch(/lacks 0001_schema.*Fix: drop it/);
      }
    } finally {
      await inbox.close();
      await t.close();
    }
  });
});
