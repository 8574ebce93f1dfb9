/**
 * The operator CLI's guard rails (through its entry in this process; `--version`, a usage error's
 * exit status and the terminal prompt from its own process): bad connection settings and
 * filter values are usage errors (exit 2) before anything is opened; `dead replay` shows what
 * it would do (`--dry-run`), asks before `--all` (or needs `--yes`), and refuses events older
 * than the retention unless `--force`; replay, skip and unblock give up on a held key after
 * `--lock-timeout`; `--data-dir` works on an embedded database on disk;
 * `--version`. Real PostgreSQL, apart from `--data-dir` (PGlite by definition).
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { sql } from 'kysely';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { cli, cliProcess, DB_ENV, postgresUrlOrEmpty, type Run } from './support/cli.js';
import { postgresTarget, type TargetDb, uniqueName } from './support/databases.js';
import { perTestSchemas } from './support/per-test-schemas.js';

const { cli: cliAsProcess, bundle } = cliProcess();

/** The CLI on a terminal: `script` gives it a pseudo-terminal, and `answer` is typed into it. */
function cliOnTerminal(args: string[], answer: string): Promise<Run> {
  const line = [process.execPath, bundle(), ...args].map((a) => `'${a}'`).join(' ');
  return new Promise((done) => {
    const child = execFile(
      'script',
      ['-qec', line, '/dev/null'],
      { env: { ...process.env, ...DB_ENV } },
      (err, stdout, stderr) => {
        const code = err ? Number((err as { code?: unknown }).code ?? 1) : 0;
        done({ code, stdout, stderr, bytes: Buffer.from(stdout), json: undefined });
      },
    );
    child.stdin?.end(answer);
  });
}

const version = JSON.parse(readFileSync('package.json', 'utf8')).version;

function error(r: Run): { code: string; message: string; [k: string]: unknown } {
  return JSON.parse(r.stderr).error;
}

/**
 * Runs these CLI commands while another session's open transaction holds `key`'s row, as a
 * slow handler's (or a stuck session's) does; each result is undefined when that command was
 * still waiting after 30 s, so a wait without a bound fails the test instead of hanging it.
 */
async function whileKeyHeld(schema: string, key: string, commands: string[][]): Promise<(Run | undefined)[]> {
  const holder = new pg.Client({ connectionString: postgresUrlOrEmpty });
  await holder.connect();
  try {
    await holder.query('begin');
    await holder.query(`select 1 from "${schema}".keys where key = $1 for update`, [key]);
    let bound: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<undefined>((resolve) => {
      bound = setTimeout(() => resolve(undefined), 30_000);
    });
    const runs = await Promise.all(commands.map((c) => Promise.race([cli(c), gaveUp])));
    clearTimeout(bound);
    return runs;
  } finally {
    await holder.query('rollback').catch(() => {});
    await holder.end();
  }
}

describe('CLI argument checks (no database is opened)', { timeout: 120_000 }, () => {
  it('a misspelt command or option: exit 2, naming the nearest one', async () => {
    const [command, top, option, far] = await Promise.all([
      cli(['dead', 'lsit']),
      cli(['stauts']),
      cli(['dead', 'list', '--reson', 'poison']),
      cli(['dead', 'list', '--zzz']),
    ]);
    expect([command.code, top.code, option.code, far.code]).toEqual([2, 2, 2, 2]);
    expect(command.stderr).toContain(
      'webhook-inbox: unknown command "dead lsit"; did you mean `webhook-inbox dead list`?',
    );
    expect(top.stderr).toContain('unknown command "stauts"; did you mean `webhook-inbox status`?');
    expect(option.stderr).toContain('webhook-inbox: unknown option --reson; did you mean --reason?');
    // Node's own advice about `--` and positional arguments is not for a misspelt option.
    expect(option.stderr).not.toContain('positional');
    expect(far.stderr).toContain('unknown option --zzz\nusage: webhook-inbox dead list');
  });

  it('--version, --db, DATABASE_URL, --data-dir, --reason, --retention, --raw with --json: exit 2 naming the option', async () => {
    const empty = resolve('.tmp', uniqueName('cli-not-a-database'));
    mkdirSync(empty, { recursive: true });
    writeFileSync(`${empty}/notes.txt`, 'not a database');
    try {
      // A well-formed URL even without a server: the arguments are refused before any connection.
      const url = postgresUrlOrEmpty || 'postgres://postgres@127.0.0.1:5432/test';
      const runs = await Promise.all([
        cliAsProcess(['--version']),
        cli(['status', '--db', 'not-a-url', '--json']),
        cli(['status', '--json'], { DATABASE_URL: 'not-a-url' }),
        cli(['status', '--db', 'mysql://u:secret@host/db', '--json']),
        cli(['status', '--db', url, '--data-dir', empty, '--json']),
        cli(['status', '--data-dir', resolve('.tmp', uniqueName('missing')), '--json']),
        cli(['migrate', '--data-dir', empty, '--json']),
        cli(['dead', 'list', '--reason', 'bogus', '--json'], { DATABASE_URL: url }),
        cli(['dead', 'replay', '--all', '--yes', '--reason', 'bogus', '--json'], { DATABASE_URL: url }),
        cli(['dead', 'replay', 'evt-1', '--retention', '7', '--json'], { DATABASE_URL: url }),
        cli(['dead', 'show', 'evt-1', '--raw', '--json'], { DATABASE_URL: url }),
        cliAsProcess(['status', '--db', 'not-a-url']),
        // The application's configuration, from its environment: checked, named.
        cli(['status', '--json'], { DATABASE_URL: url, WEBHOOK_INBOX_SCHEMA: 'Billing' }),
        cli(['status', '--json'], { DATABASE_URL: url, WEBHOOK_INBOX_TABLE_PREFIX: 'wh-' }),
        cli(['status', '--json'], { DATABASE_URL: url, WEBHOOK_INBOX_SOURCE: 'two words' }),
        cli(['dead', 'replay', 'evt-1', '--json'], { DATABASE_URL: url, WEBHOOK_INBOX_RETENTION: 'a week' }),
        cli(['dead', 'list', '--since', 'yesterday', '--json'], { DATABASE_URL: url }),
        cli(['dead', 'list', '--cause', 'not-a-cause', '--json'], { DATABASE_URL: url }),
        cli(['dead', 'groups', '--since', '10:15', '--until', '10:00', '--json'], { DATABASE_URL: url }),
        cli(['migrate', '--sql', '--check', '--json'], { DATABASE_URL: url }),
      ]);
      const [
        ver,
        badDb,
        badEnv,
        mysql,
        both,
        missingDir,
        notEmpty,
        reason,
        replayReason,
        retention,
        raw,
        text,
        ...fromEnv
      ] = runs;
      expect(ver.code).toBe(0);
      expect(ver.stdout.trim()).toBe(version);
      expect(runs.slice(1).map((r) => r.code)).toEqual(runs.slice(1).map(() => 2));
      expect(error(badDb).message).toMatch(/^--db must be a PostgreSQL URL like postgres:\/\//);
      expect(error(badDb).message).not.toContain('ENOTFOUND');
      expect(error(badEnv).message).toMatch(/^DATABASE_URL must be a PostgreSQL URL/);
      expect(error(mysql).message).toContain('mysql://u:***@host/db'); // the password is not echoed
      expect(error(both).message).toContain('--db or --data-dir, not both');
      expect(error(missingDir).message).toContain('holds no embedded database');
      expect(error(notEmpty).message).toContain('is not empty');
      expect(error(reason).message).toContain('--reason must be one of poison, late, rejected; got "bogus"');
      expect(error(replayReason).message).toContain('--reason must be one of');
      expect(error(retention).message).toContain('--retention must be a duration');
      expect(error(raw).message).toContain('--raw or --json');
      expect(text.stderr).toMatch(/^webhook-inbox: --db must be a PostgreSQL URL/);
      expect(fromEnv.map((r) => error(r).message.split(';')[0])).toEqual([
        'WEBHOOK_INBOX_SCHEMA must be a lower-case SQL identifier',
        'WEBHOOK_INBOX_TABLE_PREFIX must be a lower-case SQL identifier',
        'WEBHOOK_INBOX_SOURCE must be 1-100 printable ASCII characters',
        "WEBHOOK_INBOX_RETENTION must be a duration like 7d, 36h (as the inbox's retention option), or false",
        '--since must be an ISO 8601 time (2026-11-28T10:00:00Z), a time of today in UTC (10:00) or a duration ago (2h)',
        '--cause must be a cause as `dead groups` lists it (12 hex characters)',
        '--since must be before --until\nusage: webhook-inbox dead groups [--reason R] [--cause C] [--key K|prefix*] [--type T] [--since T] [--until T] [options]',
        'give --sql or --check, not both\nusage: webhook-inbox migrate [--sql | --check] [options]',
      ]);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!postgresTarget)('dead replay guard rails (postgres)', { timeout: 240_000 }, () => {
  const database = perTestSchemas(postgresTarget!);
  let t: TargetDb;
  let inbox: Inbox | undefined;
  beforeEach(() => {
    t = database();
  });
  afterEach(async () => {
    await inbox?.close();
    inbox = undefined;
  });

  it('--dry-run changes nothing; --all asks on a terminal or needs --yes; older than the retention needs --force', async () => {
    let broken = true;
    const applied: string[] = [];
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      maxAttempts: 1,
      handle: (event) => {
        if (broken) throw new Error('handler is broken');
        applied.push(event.id);
      },
    });
    for (const id of ['u-1', 'u-2', 'u-3']) {
      await inbox.receive({ headers: { 'idempotency-key': id }, rawBody: Buffer.from('{"n":1}') });
    }
    // u-2 and u-3 were received 8 days ago: beyond the default retention of 7 days.
    await sql`update ${sql.table(`${t.schema}.events`)} set received_at = now() - interval '8 days'
              where id in ('u-2', 'u-3')`.execute(await inbox.kysely());
    const S = ['--schema', t.schema, '--json'];
    const dead = async () => (await cli(['status', ...S])).json.events.dead;
    expect(await dead()).toBe(3);

    // --dry-run: what would happen, and nothing happens.
    const [dry, dryText, noYes] = await Promise.all([
      cli(['dead', 'replay', '--all', '--dry-run', ...S]),
      cli(['dead', 'replay', 'u-1', 'u-2', 'nope', '--dry-run', '--schema', t.schema]),
      cli(['dead', 'replay', '--all', ...S]),
    ]);
    expect(dry.code).toBe(0);
    expect(dry.json).toMatchObject({ dryRun: true, count: 3, olderThanRetention: 2 });
    expect(dry.json.sample.map((r: any) => [r.id, r.outcome, r.status, r.olderThanRetention])).toEqual([
      ['u-2', 'would-requeue', 'dead', true],
      ['u-3', 'would-requeue', 'dead', true],
      ['u-1', 'would-requeue', 'dead', false],
    ]);
    expect(dryText.code).toBe(3); // the exit code the replay would have: 'nope' is not found
    expect(dryText.stdout).toMatch(/u-1 .* would re-queue$/m);
    expect(dryText.stdout).toMatch(/u-2 .* would re-queue \(needs --force: older than retention\)$/m);
    expect(dryText.stdout).toContain('2 of 3 would be re-queued, 1 only with --force');
    // --all without a terminal and without --yes: a usage error naming --yes.
    expect(noYes.code).toBe(2);
    expect(error(noYes).message).toContain('pass --yes');
    expect(await dead()).toBe(3);

    // Older than the retention: refused (exit 4) unless --force, or a longer --retention.
    const old = await cli(['dead', 'replay', 'u-1', 'u-2', ...S]);
    expect(old.code).toBe(4);
    expect(error(old)).toMatchObject({
      code: 'older-than-retention',
      events: [{ id: 'u-2', source: 'default' }],
    });
    expect(error(old).message).toContain('--force');
    expect(await dead()).toBe(3);
    // The application's retention from its environment, as the CLI reads it (and its schema).
    const fromEnv = await cli(['dead', 'replay', 'u-2', '--dry-run', '--json'], {
      ...DB_ENV,
      WEBHOOK_INBOX_SCHEMA: t.schema,
      WEBHOOK_INBOX_RETENTION: '30d',
    });
    expect(fromEnv.json).toMatchObject([{ id: 'u-2', outcome: 'would-requeue', olderThanRetention: false }]);
    const longer = await cli(['dead', 'replay', 'u-2', '--retention', '30d', ...S]);
    expect(longer.code).toBe(0);
    expect(longer.json).toMatchObject([{ id: 'u-2', outcome: 'requeued', status: 'pending' }]);
    const forced = await cli(['dead', 'replay', 'u-3', '--force', ...S]);
    expect(forced.json).toMatchObject([{ id: 'u-3', outcome: 'requeued' }]);
    expect(await dead()).toBe(1);

    // On a terminal, --all asks: "n" changes nothing (exit 4), "y" re-queues.
    const declined = await cliOnTerminal(['dead', 'replay', '--all', '--schema', t.schema], 'n\n');
    expect(declined.stdout).toContain('Re-queue 1 dead letter for the application to apply? [y/N]');
    expect(declined.code).toBe(4);
    expect(declined.stdout).toContain('not confirmed; nothing was changed');
    expect(await dead()).toBe(1);
    const confirmed = await cliOnTerminal(['dead', 'replay', '--all', '--schema', t.schema], 'y\n');
    expect(confirmed.code).toBe(0);
    expect(confirmed.stdout).toContain('1 of 1 re-queued');
    expect(await dead()).toBe(0);

    // The application's sweeper applies what was re-queued, each once.
    broken = false;
    await inbox.sweep();
    expect(applied.sort()).toEqual(['u-1', 'u-2', 'u-3']);
  });

  it('a key held by another transaction: replay gives up after --lock-timeout naming the key (exit 4), changing nothing', async () => {
    let broken = true;
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      maxAttempts: 1,
      handle: () => {
        if (broken) throw new Error('handler is broken');
      },
    });
    await inbox.receive({
      headers: { 'idempotency-key': 'o-1', 'x-key': 'acct-held', 'x-seq': '1' },
      rawBody: Buffer.from('{"n":1}'),
    });
    const S = ['--schema', t.schema, '--json'];
    expect(await inbox.event('o-1')).toMatchObject({ status: 'dead', key: 'acct-held' });
    const [held] = await whileKeyHeld(t.schema, 'acct-held', [
      ['dead', 'replay', 'o-1', '--lock-timeout', '300ms', ...S],
    ]);
    expect(held, 'the replay still waited for the key after 30 s').toBeDefined();
    expect(held!.code).toBe(4);
    expect(error(held!)).toMatchObject({ code: 'locked' });
    expect(error(held!).message).toContain('key "acct-held"');
    expect(error(held!).message).toContain('300 ms');
    expect(await inbox.event('o-1')).toMatchObject({ status: 'dead' });
    expect(await inbox.keyState('acct-held')).toMatchObject({ state: 'blocked' });
    const bad = await cli(['dead', 'replay', 'o-1', '--lock-timeout', '300', ...S]);
    expect(bad.code).toBe(2);
    expect(error(bad).message).toContain('--lock-timeout must be a duration');

    // Released: the same replay goes through.
    const freed = await cli(['dead', 'replay', 'o-1', '--lock-timeout', '300ms', ...S]);
    expect(freed.code).toBe(0);
    expect(freed.json).toMatchObject([{ id: 'o-1', outcome: 'requeued', status: 'held' }]);
    broken = false;
    expect(await inbox.drain('acct-held')).toBe(1);
    expect(await inbox.event('o-1')).toMatchObject({ status: 'processed' });
  });

  it('a key held by another transaction: keys skip, dead skip and keys unblock give up after --lock-timeout naming the key (exit 4), changing nothing', async () => {
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      maxAttempts: 1,
      handle: (event) => {
        if (event.seq === 1) throw new Error('poison');
      },
    });
    await inbox.receive({
      headers: { 'idempotency-key': 'p-1', 'x-key': 'acct-stuck', 'x-seq': '1' },
      rawBody: Buffer.from('{"n":1}'),
    });
    const S = ['--schema', t.schema, '--json'];
    const before = await inbox.keyState('acct-stuck');
    expect(before).toMatchObject({ state: 'blocked', nextSeq: 1 });

    const runs = await whileKeyHeld(t.schema, 'acct-stuck', [
      ['keys', 'skip', 'acct-stuck', '--lock-timeout', '300ms', ...S],
      ['dead', 'skip', 'p-1', '--lock-timeout', '300ms', ...S],
      ['keys', 'unblock', 'acct-stuck', '--lock-timeout', '300ms', ...S],
    ]);
    for (const run of runs) {
      expect(run, 'the command still waited for the key after 30 s').toBeDefined();
      expect(run!.code, run!.stderr).toBe(4);
      expect(error(run!)).toMatchObject({ code: 'locked' });
      expect(error(run!).message).toContain('key "acct-stuck"');
      expect(error(run!).message).toContain('300 ms');
    }
    expect(await inbox.keyState('acct-stuck')).toEqual(before);
    const bad = await cli(['keys', 'skip', 'acct-stuck', '--lock-timeout', 'soon', ...S]);
    expect(bad.code).toBe(2);
    expect(error(bad).message).toContain('--lock-timeout must be a duration');

    // Released: the same skip goes through.
    const freed = await cli(['keys', 'skip', 'acct-stuck', '--lock-timeout', '300ms', ...S]);
    expect(freed.code, freed.stderr).toBe(0);
    expect(freed.json).toMatchObject({ key: 'acct-stuck', fromSeq: 1, toSeq: 1, nextSeq: 2 });
    expect(await inbox.keyState('acct-stuck')).toMatchObject({ state: 'open', nextSeq: 2 });
  });
});

describe('--data-dir: an embedded database on disk', { timeout: 240_000 }, () => {
  const dir = resolve('.tmp', uniqueName('cli-data-dir'));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('migrate creates it; status, dead list and dead replay work on it; the application applies the replay', async () => {
    const migrated = await cli(['migrate', '--data-dir', dir, '--json'], {});
    expect(migrated.code).toBe(0);
    expect(migrated.json).toMatchObject({ migrated: true, schema: 'webhook_inbox' });

    const open = (handle: () => void) =>
      createInbox({ dataDir: dir, sweepIntervalMs: 0, maxAttempts: 1, handle });
    let app = open(() => {
      throw new Error('broken');
    });
    await app.receive({ headers: { 'idempotency-key': 'evt-1' }, rawBody: Buffer.from('{}') });
    await app.close();

    // DATABASE_URL is set in this environment: --data-dir wins over it.
    const listed = await cli(['dead', 'list', '--data-dir', dir, '--json']);
    expect(listed.json).toMatchObject([{ id: 'evt-1', deadReason: 'poison' }]);
    const replayed = await cli(['dead', 'replay', 'evt-1', '--data-dir', dir, '--json'], {});
    expect(replayed.json).toMatchObject([{ id: 'evt-1', outcome: 'requeued' }]);

    const applied: string[] = [];
    app = open(() => {
      applied.push('evt-1');
    });
    await app.sweep();
    await app.close();
    expect(applied).toEqual(['evt-1']);
    expect((await cli(['status', '--data-dir', dir, '--json'], {})).json.events).toMatchObject({
      processed: 1,
      dead: 0,
    });
  });
});
