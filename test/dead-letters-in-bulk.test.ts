/**
 * An incident, as an operator handles it on real PostgreSQL: 200 dead letters from two causes
 * across an hour; `dead groups` shows both causes with their counts; a replay of one cause
 * within a 15-minute window counts right in its dry run, then re-queues exactly those, in key
 * order, and the application applies each once; a replay killed in the middle (the process, by
 * SIGKILL) and run again finishes the job with nothing applied twice. `dead purge` deletes only
 * dead rows past the age, in batches, never one that blocks its key; `dead skip --all` skips
 * what a selection's keys wait for, once.
 */
import { spawn } from 'node:child_process';
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { cli, cliProcess, DB_ENV } from './support/cli.js';
import { postgresTarget, type TargetDb } from './support/databases.js';

const COUNT = 200;
const id = (i: number) => `evt-${String(i).padStart(3, '0')}`;
const key = (i: number) => `acct-${String(i).padStart(3, '0')}`;
/** Even events fail on a refused connection, odd ones on a missing customer: two causes. */
const refused = (i: number) => i % 2 === 0;

describe.skipIf(!postgresTarget)('dead letters handled in bulk (PostgreSQL)', () => {
  const processCli = cliProcess();
  let t: TargetDb;
  let inbox: Inbox;
  let db: Kysely<any>;
  let broken = true;
  /** How many times the handler applied each event. */
  const applied = new Map<string, number>();
  let base: Date;
  let S: string[];

  beforeAll(async () => {
    t = await postgresTarget!.open();
    S = ['--schema', t.schema, '--json'];
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      maxAttempts: 1,
      handle: (event) => {
        const n = Number(event.id.slice(4));
        if (broken) {
          if (refused(n))
            throw Object.assign(new Error(`connect ECONNREFUSED 10.0.0.${n % 250}:5432`), {
              code: 'ECONNREFUSED',
            });
          throw new TypeError(`customer cus_${n}abcdef of invoice "${event.id}" not found`);
        }
        applied.set(event.id, (applied.get(event.id) ?? 0) + 1);
      },
    });
    for (let i = 0; i < COUNT; i++) {
      const outcome = await inbox.receive({
        headers: {
          'idempotency-key': id(i),
          'x-key': key(i),
          'x-seq': '1',
          'content-type': 'application/json',
        },
        rawBody: Buffer.from(JSON.stringify({ n: i })),
      });
      expect(outcome.body).toMatchObject({ status: 'dead-lettered' });
    }
    // Across an hour: event i failed at base + 18 s × i (the clock, set by hand).
    db = await inbox.kysely();
    const { rows } = await sql<{
      base: Date;
    }>`select date_trunc('minute', now()) - interval '1 hour' as base`.execute(db);
    base = new Date(rows[0]!.base);
    await sql`update ${sql.table(`${t.schema}.events`)}
                 set failed_at = ${base}::timestamptz + (substr(id, 5)::int * 18) * interval '1 second'`.execute(
      db,
    );
  });

  afterAll(async () => {
    await inbox?.close();
    await t?.close();
  });

  const at = (minutes: number) => new Date(base.getTime() + minutes * 60_000).toISOString();
  async function sweepAll(): Promise<void> {
    for (;;) {
      const r = await inbox.sweep();
      if (r.drained + r.applied === 0) return;
    }
  }

  it('dead groups: two causes, 100 each, with their first and last failure and keys', async () => {
    const groups = await cli(['dead', 'groups', ...S]);
    expect(groups.stderr).toBe('');
    expect(groups.code).toBe(0);
    expect(groups.json).toHaveLength(2);
    const byFirst = [...groups.json].sort((a: any, b: any) => a.firstAt.localeCompare(b.firstAt));
    expect(byFirst).toMatchObject([
      { reason: 'poison', count: 100, keys: 100, firstAt: at(0), lastAt: at((198 * 18) / 60) },
      { reason: 'poison', count: 100, keys: 100, firstAt: at(18 / 60), lastAt: at((199 * 18) / 60) },
    ]);
    expect(byFirst[0].sample.error).toContain('ECONNREFUSED');
    expect(byFirst[1].sample.error).toContain('TypeError: customer');
    expect(byFirst[0].cause).not.toBe(byFirst[1].cause);
    // Narrowed by a window, the groups count only what failed in it.
    const window = await cli(['dead', 'groups', '--since', at(15), '--until', at(30), ...S]);
    expect(window.json.map((g: any) => g.count)).toEqual([25, 25]);
  });

  it('a replay of one cause in a 15-minute window: the dry run counts it, then exactly those are applied once, in key order', async () => {
    const groups = (await cli(['dead', 'groups', ...S])).json;
    const cause = groups.find((g: any) => g.sample.error.includes('ECONNREFUSED')).cause;
    const select = ['--all', '--cause', cause, '--since', at(15), '--until', at(30)];
    // 15:00 <= 18 s × i < 30:00 and i even: 50, 52, … 98.
    const expected = Array.from({ length: 25 }, (_, j) => id(50 + 2 * j));

    const dry = await cli(['dead', 'replay', ...select, '--dry-run', ...S]);
    expect(dry.code).toBe(0);
    expect(dry.json).toMatchObject({ dryRun: true, count: 25, since: at(15), until: at(30) });
    expect(dry.json.sample.map((r: any) => r.id)).toEqual(expected.slice(0, 20));
    expect(dry.json.sample.every((r: any) => r.outcome === 'would-requeue')).toBe(true);
    expect((await cli(['status', ...S])).json.events.dead).toBe(COUNT);
    // Through the API in batches of 7: each one once, in key order (the rows a batch leaves dead
    // are not met again by the next).
    // (Arrival times with microseconds, as PostgreSQL's own now() writes them.)
    await sql`update ${sql.table(`${t.schema}.events`)} set received_at = received_at + interval '7 microseconds'`.execute(
      db,
    );
    const ops = await inbox.operations();
    const planned = await ops.replay(
      { all: true, cause, since: at(15), until: at(30) },
      { dryRun: true, batchSize: 7 },
    );
    expect(planned.map((r) => r.id)).toEqual(expected);
    await expect(ops.replay({ all: true, cause }, { dryRun: true, batchSize: 0 })).rejects.toThrow(
      '`batchSize` must be an integer from 1 to 10000; got 0',
    );

    const replay = await cli(['dead', 'replay', ...select, '--yes', ...S]);
    expect(replay.code).toBe(0);
    expect(replay.json.map((r: any) => [r.id, r.outcome])).toEqual(expected.map((e) => [e, 'requeued']));
    broken = false;
    await sweepAll();
    expect([...applied.keys()].sort()).toEqual(expected);
    expect([...applied.values()].every((n) => n === 1)).toBe(true);
    expect((await cli(['status', ...S])).json.events.dead).toBe(COUNT - 25);
    // Run again: nothing matches, nothing is applied twice.
    const again = await cli(['dead', 'replay', ...select, '--yes', ...S]);
    expect(again.json).toEqual([]);
  });

  it('a replay killed in the middle, run again, finishes the job with nothing applied twice', async () => {
    const groups = (await cli(['dead', 'groups', ...S])).json;
    const cause = groups.find((g: any) => g.sample.error.includes('TypeError')).cause;
    const select = ['--all', '--cause', cause, '--yes', '--lock-timeout', '60s'];
    const odd = Array.from({ length: 100 }, (_, j) => 2 * j + 1);
    // Another session holds key acct-151: the replay re-queues every key before it, then waits.
    const holder = new pg.Client({ connectionString: DB_ENV.DATABASE_URL });
    await holder.connect();
    await holder.query('begin');
    await holder.query(`select 1 from "${t.schema}".keys where key = $1 for update`, [key(151)]);
    const child = spawn(process.execPath, [processCli.bundle(), 'dead', 'replay', ...select, ...S], {
      env: { ...process.env, ...DB_ENV },
      stdio: 'ignore',
    });
    const exited = new Promise<number | null>((done) => child.on('exit', (code) => done(code)));
    const waiting = async () =>
      Number(
        (
          await sql<{ n: string }>`select count(*) as n from ${sql.table(`${t.schema}.events`)}
                                    where id = any(${odd.map(id)}) and status <> 'dead'`.execute(db)
        ).rows[0]!.n,
      );
    // Keys acct-001 … acct-149 (75 of them) re-queued; the process waits for acct-151.
    await expect.poll(waiting, { timeout: 30_000, interval: 50 }).toBe(75);
    await expect
      .poll(
        async () =>
          // A session waits for the key row the holder locked: the replay, whatever its text.
          (
            await holder.query(
              'select count(*)::int as n from pg_stat_activity where pg_backend_pid() = any(pg_blocking_pids(pid))',
            )
          ).rows[0].n,
        { timeout: 30_000, interval: 50 },
      )
      .toBeGreaterThan(0);
    child.kill('SIGKILL');
    expect(await exited).toBeNull();
    await holder.query('rollback');
    await holder.end();
    expect(await waiting()).toBe(75);

    const rerun = await cli(['dead', 'replay', ...select, ...S]);
    expect(rerun.code).toBe(0);
    expect(rerun.json.map((r: any) => r.id)).toEqual(odd.filter((i) => i >= 151).map(id));
    await sweepAll();
    for (const i of odd) expect(applied.get(id(i))).toBe(1);
    expect([...applied.values()].every((n) => n === 1)).toBe(true);
  });

  it('dead purge: only dead rows past the age, in batches, with a dry run; never one that blocks its key', async () => {
    const events = sql.table(`${t.schema}.events`);
    // What is left: 75 dead even events (their keys blocked) and 125 applied. Unblock 20 keys by
    // skipping their dead letters; make 10 of those and 10 blocking ones 40 days old.
    const dead = (
      await sql<{ id: string }>`select id from ${events} where status = 'dead' order by id`.execute(db)
    ).rows.map((r) => r.id);
    expect(dead).toHaveLength(75);
    // The first 20 (failed before minute 12) skipped in bulk: a dry run counts them; a re-run finds none.
    const skipDry = await cli(['dead', 'skip', '--all', '--until', at(12), '--dry-run', ...S]);
    expect(skipDry.json).toMatchObject({ dryRun: true, count: 20 });
    const skipped = await cli(['dead', 'skip', '--all', '--until', at(12), '--yes', ...S]);
    expect(skipped.json.map((r: any) => r.key)).toEqual(dead.slice(0, 20).map((d) => `acct-${d.slice(4)}`));
    expect((await cli(['dead', 'skip', '--all', '--until', at(12), '--yes', ...S])).json).toEqual([]);
    const old = [...dead.slice(0, 10), ...dead.slice(20, 30)];
    await sql`update ${events} set received_at = now() - interval '40 days' where id = any(${old})`.execute(
      db,
    );
    await sql`update ${events} set processed_at = now() - interval '40 days' where status = 'processed'`.execute(
      db,
    );

    const dry = await cli(['dead', 'purge', '--older-than', '30d', '--dry-run', ...S]);
    expect(dry.json).toEqual({ purged: 10, blocking: 10, dryRun: true });
    const purge = await cli(['dead', 'purge', '--older-than', '30d', '--yes', ...S]);
    expect(purge.json).toEqual({ purged: 10, blocking: 10, dryRun: false });
    const left = (
      await sql<{ id: string }>`select id from ${events} where status = 'dead' order by id`.execute(db)
    ).rows.map((r) => r.id);
    expect(left).toEqual(dead.filter((d) => !dead.slice(0, 10).includes(d)));
    // Processed rows are retention's, not purge's: all still there.
    expect((await cli(['status', ...S])).json.events.processed).toBe(125);
  });
});
