/**
 * A pipeline (src/db/drivers/extended-protocol.ts) parses each statement once per session, in the first
 * pipeline that needs it. When a statement fails, PostgreSQL skips the rest up to the Sync, so
 * the statements after it were never parsed, and the failed one may or may not have been. The
 * session must stay usable either way: the next pipeline neither binds a statement that does
 * not exist (26000) nor parses one that does (42P05). And the answer of every statement is read
 * with the columns its first run described, also once the description is no longer sent.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runPipeline } from '../src/db/drivers/extended-protocol.js';
import { postgresUrl } from './support/databases.js';

describe.runIf(postgresUrl)('pipelines recover from failures (real Postgres)', () => {
  let client: pg.Client;
  beforeAll(async () => {
    client = new pg.Client({ connectionString: postgresUrl! });
    await client.connect();
  });
  afterAll(async () => {
    await client.end();
  });

  const failing = { name: 'wi_pipe:test.failing', text: 'select 1 / $1::int as quotient', values: [0] };
  const after = { name: 'wi_pipe:test.after', text: 'select $1::text as echo, 2 as two', values: ["it's"] };

  it('a statement that fails: the statements after it are parsed next time, the failed one is not parsed twice', async () => {
    await expect(runPipeline(client, [failing, after])).rejects.toMatchObject({ code: '22012' });
    // `after` was never parsed (skipped after the error): were it taken for parsed, this would
    // fail with 26000 (prepared statement does not exist).
    const [echo] = await runPipeline(client, [after]);
    expect(echo?.rows).toEqual([{ echo: "it's", two: 2 }]);
    // `failing` was parsed before its Execute failed: parsing it again without closing it first
    // would fail with 42P05 (prepared statement already exists); it fails as itself instead.
    await expect(runPipeline(client, [failing])).rejects.toMatchObject({ code: '22012' });
    const [quotient, again] = await runPipeline(client, [
      { ...failing, values: [1] },
      { ...after, values: ['\\'] },
    ]);
    expect(quotient?.rows).toEqual([{ quotient: 1 }]);
    expect(again?.rows).toEqual([{ echo: '\\', two: 2 }]);
  });

  it('rows, command tags, counts and types come back as node-postgres reads them, described once and then not', async () => {
    const steps = [
      { name: 'wi_pipe:test.begin', text: 'begin', values: [] },
      {
        name: 'wi_pipe:test.types',
        text: 'select $1::bigint as big, $2::bytea as bytes, $3::jsonb as json, $4::boolean as flag, null::text as nothing',
        values: ['9007199254740993', Buffer.from([0, 1, 255]), '{"a":[1,"b"]}', true],
      },
      { name: 'wi_pipe:test.rollback', text: 'rollback', values: [] },
    ];
    for (let run = 0; run < 2; run++) {
      const [begin, row, rollback] = await runPipeline(client, steps);
      expect(begin).toMatchObject({ rows: [], command: 'BEGIN' });
      expect(row?.rows).toEqual([
        {
          big: '9007199254740993',
          bytes: Buffer.from([0, 1, 255]),
          json: { a: [1, 'b'] },
          flag: true,
          nothing: null,
        },
      ]);
      expect(rollback).toMatchObject({ rows: [], command: 'ROLLBACK' });
      expect(row).toMatchObject({ command: 'SELECT', rowCount: 1 });
    }
    const [, , inserted, updated] = await runPipeline(client, [
      steps[0] as (typeof steps)[0],
      {
        name: 'wi_pipe:test.table',
        text: 'create temporary table counted (n int) on commit drop',
        values: [],
      },
      {
        name: 'wi_pipe:test.insert',
        text: 'insert into counted select generate_series(1, $1::int)',
        values: [3],
      },
      { name: 'wi_pipe:test.update', text: 'update counted set n = n + 1 where n > $1::int', values: [1] },
      steps[2] as (typeof steps)[2],
    ]);
    expect(inserted).toMatchObject({ command: 'INSERT', rowCount: 3 });
    expect(updated).toMatchObject({ command: 'UPDATE', rowCount: 2 });
    const { rows } = await client.query(
      `select count(*)::int as n from pg_prepared_statements where name like 'wi_pipe:test.%'`,
    );
    expect(rows[0].n).toBe(8);
  });
});
