/**
 * The `webhook-inbox` CLI, run as an operator runs it: with no handler, against the same
 * PostgreSQL database as the application, every source at once. Every command is run here
 * with --json parsed; usage errors exit 2 and change nothing. Real PostgreSQL only: an
 * in-memory PGlite cannot be shared with another process.
 */
import { resolve } from 'node:path';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { createInbox, type Inbox, migrations } from '../src/index.js';
import { cli, cliProcess, DB_ENV, run } from './support/cli.js';
import { postgresTarget, type TargetDb } from './support/databases.js';
import { deliver } from './support/deliver.js';
import { perTestSchemas } from './support/per-test-schemas.js';

/**
 * Commands run through the CLI's entry in this process (test/support/cli.ts); the exit codes a
 * shell sees come from the bundled CLI's own process, and one run goes through
 * `tsx src/cli.ts` itself, the way a developer runs it.
 */
const { cli: cliAsProcess } = cliProcess();

function tsxCli(args: string[]) {
  return run(resolve('node_modules/.bin/tsx'), ['src/cli.ts', ...args], DB_ENV);
}

function body(amount: number) {
  return Buffer.from(JSON.stringify({ amount }));
}

// A few Node processes and a ledger app: generous timeouts for a busy CI box.
describe.skipIf(!postgresTarget)('webhook-inbox CLI (postgres)', { timeout: 300_000 }, () => {
  const database = perTestSchemas(postgresTarget!);
  let t: TargetDb;
  let server: LedgerServer | undefined;
  let stripe: Inbox | undefined;

  beforeEach(() => {
    t = database();
  });
  afterEach(async () => {
    await server?.close();
    await stripe?.close();
    server = undefined;
    stripe = undefined;
  });

  it('every command with --json: status, dead list/show/replay/skip, keys list/show/unblock/skip, prune', async () => {
    const S = ['--schema', t.schema, '--json'];
    const migrated = await tsxCli(['migrate', ...S]);
    expect(migrated.code).toBe(0);
    expect(migrated.json).toEqual({
      migrated: true,
      schema: t.schema,
      tablePrefix: '',
      ran: migrations.map(([name]) => name),
    });
    expect((await cli(['migrate', ...S])).json.ran).toEqual([]);

    // The application: the ledger (source 'default') and a second inbox (source 'stripe').
    server = await startLedger({
      ledgerSchema: t.appSchema,
      inbox: { db: t.db, schema: t.schema, sweepIntervalMs: 0, maxAttempts: 2, gapTimeoutMs: 3_600_000 },
    });
    const { url, ledger, inbox } = server;
    let stripeBroken = true;
    const stripeApplied: string[] = [];
    stripe = createInbox({
      db: t.another(),
      schema: t.schema,
      source: 'stripe',
      sweepIntervalMs: 0,
      maxAttempts: 2,
      handle: (event) => {
        if (stripeBroken) throw new Error('stripe handler is broken');
        stripeApplied.push(event.id);
      },
    });
    const ledgerOf = async (key: string) =>
      (await ledger.account(await inbox.kysely(), key)).entries.map((e) => e.seq);

    // Poison: acct-1 seq 1 (seqs 2 and 3 held behind it), acct-2 and acct-3 seq 1, and an
    // unordered stripe event.
    for (const key of ['acct-1', 'acct-2', 'acct-3']) {
      ledger.failNext.set(key, 1_000_000);
      for (let i = 0; i < 2; i++) await deliver(url, `${key}-1`, { amount: 1 }, { key, seq: 1 });
      expect((await deliver(url, `${key}-2`, { amount: 2 }, { key, seq: 2 })).status).toBe(202);
    }
    expect((await deliver(url, 'acct-1-3', { amount: 3 }, { key: 'acct-1', seq: 3 })).status).toBe(202);
    for (let i = 0; i < 2; i++)
      await stripe.receive({ headers: { 'idempotency-key': 'ch_1' }, rawBody: body(7) });

    const status = await cli(['status', ...S]);
    expect(status.code).toBe(0);
    expect(status.json).toMatchObject({
      sources: ['default', 'stripe'],
      events: { dead: 4, held: 4, processed: 0, pending: 0 },
      keys: { blocked: 3, holding: 3 },
      deadByReason: { poison: 4 },
    });
    expect(status.json.oldestHeldAgeMs).toBeGreaterThanOrEqual(0);

    // Looking: lists, filters, one dead letter in full, keys.
    const [all, onlyStripe, filtered, none, shown, keys, key] = await Promise.all([
      cli(['dead', 'list', ...S]),
      cli(['dead', 'list', '--source', 'stripe', ...S]),
      cli(['dead', 'list', '--key', 'acct-1', '--reason', 'poison', '--newer-than', '1h', ...S]),
      cli(['dead', 'list', '--older-than', '1h', ...S]),
      cli(['dead', 'show', 'acct-1-1', ...S]),
      cli(['keys', 'list', ...S]),
      cli(['keys', 'show', 'acct-1', ...S]),
    ]);
    expect(all.json.map((d: any) => `${d.source}/${d.id}`).sort()).toEqual([
      'default/acct-1-1',
      'default/acct-2-1',
      'default/acct-3-1',
      'stripe/ch_1',
    ]);
    expect(onlyStripe.json).toMatchObject([
      { source: 'stripe', id: 'ch_1', key: null, deadReason: 'poison' },
    ]);
    expect(filtered.json).toMatchObject([{ id: 'acct-1-1', blocking: true, attempts: 2 }]);
    expect(none.json).toEqual([]);
    expect(shown.code).toBe(0);
    expect(shown.json).toMatchObject({
      id: 'acct-1-1',
      status: 'dead',
      deadReason: 'poison',
      blocking: true,
      payload: '{"amount":1}',
      payloadEncoding: 'utf8',
    });
    expect(shown.json.lastError).toContain('failing on purpose for account acct-1');
    expect(keys.json.map((k: any) => [k.key, k.state, k.blockedSeq, k.heldCount])).toEqual(
      expect.arrayContaining([
        ['acct-1', 'blocked', 1, 2],
        ['acct-2', 'blocked', 1, 1],
        ['acct-3', 'blocked', 1, 1],
      ]),
    );
    expect(key.json).toMatchObject({
      key: 'acct-1',
      nextSeq: 1,
      heldSeqs: [2, 3],
      gaps: [],
      deadLetters: [{ id: 'acct-1-1' }],
    });

    // Usage errors: exit 2, a clear message, nothing changed.
    const usage = await Promise.all([
      cli(['dead', 'replay', ...S]),
      cli(['dead', 'replay', 'acct-1-1', '--all', ...S]),
      cli(['dead', 'replay', 'acct-1-1', '--key', 'acct-1', ...S]),
      cli(['dead', 'skip', ...S]),
      cli(['keys', 'unblock', 'a', 'b', ...S]),
      cli(['prune', '--older-than', '7', ...S]),
      cli(['dead', 'list', '--limit', '0', ...S]),
      cli(['dead', 'list', '--bogus', ...S]),
      cli(['frobnicate', ...S]),
      cli(['status', '--schema', 'Bad-Schema', '--json']),
      cli(['status', '--json'], { DATABASE_URL: '' }),
    ]);
    expect(usage.map((u) => u.code)).toEqual(usage.map(() => 2));
    const messages = usage.map((u) => JSON.parse(u.stderr).error.message);
    expect(messages[0]).toContain('give the ids to replay, or --all');
    expect(messages[5]).toContain('--older-than must be a duration');
    expect(messages[7]).toContain('unknown option --bogus');
    expect(messages[10]).toContain('DATABASE_URL');
    // Not found (3) and refused (4) change nothing either.
    const [missing, missingKey, unordered] = await Promise.all([
      cli(['dead', 'show', 'nope', ...S]),
      cli(['keys', 'unblock', 'nope', ...S]),
      cli(['dead', 'skip', 'ch_1', '--source', 'stripe', ...S]),
    ]);
    expect([missing.code, missingKey.code, unordered.code]).toEqual([3, 3, 4]);
    expect(JSON.parse(unordered.stderr).error.message).toContain('unordered');
    expect((await cli(['status', ...S])).json).toEqual({
      ...status.json,
      oldestHeldAgeMs: expect.any(Number),
    });

    // dead replay: re-queued by the CLI, applied by the application's sweeper, in order.
    ledger.failNext.clear();
    const replayed = await cli(['dead', 'replay', 'acct-1-1', ...S]);
    expect(replayed.code).toBe(0);
    expect(replayed.json).toEqual([
      { source: 'default', id: 'acct-1-1', key: 'acct-1', seq: 1, outcome: 'requeued', status: 'held' },
    ]);
    expect(await ledgerOf('acct-1')).toEqual([]);
    await inbox.sweep();
    await inbox.idle();
    expect(await ledgerOf('acct-1')).toEqual([1, 2, 3]);

    // dead skip: the seq becomes a gap, the key opens, the sweeper drains what followed.
    const skipped = await cli(['dead', 'skip', 'acct-2-1', ...S]);
    expect(skipped.json).toEqual({ source: 'default', key: 'acct-2', fromSeq: 1, toSeq: 1, nextSeq: 2 });
    await inbox.sweep();
    expect(await ledgerOf('acct-2')).toEqual([2]);
    expect((await cli(['keys', 'show', 'acct-2', ...S])).json.gaps).toMatchObject([
      { fromSeq: 1, toSeq: 1, reason: 'skip' },
    ]);

    // keys unblock: the key opens at the same cursor; seq 1 is still dead, so seq 2 still waits.
    const unblocked = await cli(['keys', 'unblock', 'acct-3', ...S]);
    expect(unblocked.json).toMatchObject({ key: 'acct-3', state: 'open', nextSeq: 1, heldCount: 1 });
    expect((await cli(['keys', 'unblock', 'acct-3', ...S])).code).toBe(4);
    await inbox.sweep();
    expect(await ledgerOf('acct-3')).toEqual([]);
    // keys skip needs a blocked key; dead skip moves past the dead seq of an open key.
    expect((await cli(['keys', 'skip', 'acct-3', ...S])).code).toBe(4);
    expect((await cli(['dead', 'skip', 'acct-3-1', ...S])).json).toMatchObject({ nextSeq: 2 });
    await inbox.sweep();
    expect(await ledgerOf('acct-3')).toEqual([2]);

    // --all with filters, across sources: only the stripe dead letter, applied by its sweeper.
    stripeBroken = false;
    const replayAll = await cli(['dead', 'replay', '--all', '--yes', '--source', 'stripe', ...S]);
    expect(replayAll.json).toMatchObject([
      { source: 'stripe', id: 'ch_1', outcome: 'requeued', status: 'pending' },
    ]);
    expect((await stripe.sweep()).applied).toBe(1);
    expect(stripeApplied).toEqual(['ch_1']);

    // keys skip on a gap-blocked key (as onGapTimeout 'block' leaves it) skips the whole missing range.
    expect((await deliver(url, 'acct-4-3', { amount: 3 }, { key: 'acct-4', seq: 3 })).status).toBe(202);
    await sql`update ${sql.table(`${t.schema}.keys`)} set state = 'blocked', blocked_seq = 1, blocked_reason = 'gap'
              where key = 'acct-4'`.execute(await inbox.kysely());
    const gapSkip = await cli(['keys', 'skip', 'acct-4', ...S]);
    expect(gapSkip.json).toEqual({ source: 'default', key: 'acct-4', fromSeq: 1, toSeq: 2, nextSeq: 3 });
    await inbox.sweep();
    expect(await ledgerOf('acct-4')).toEqual([3]);

    // prune: only processed rows older than the cutoff; ordered dedup survives it.
    await sql`update ${sql.table(`${t.schema}.events`)} set processed_at = now() - interval '8 days'
              where key = 'acct-1'`.execute(await inbox.kysely());
    const dry = await cli(['prune', '--dry-run', ...S]);
    expect(dry.json).toMatchObject({ pruned: 3, dryRun: true });
    expect((await cli(['status', ...S])).json.events.processed).toBe(7);
    const pruned = await cli(['prune', '--older-than', '7d', ...S]);
    expect(pruned.json).toMatchObject({ pruned: 3, dryRun: false });
    const after = (await cli(['status', ...S])).json;
    expect(after.events).toEqual({ pending: 0, held: 0, processed: 4, dead: 2 });
    const redelivered = await deliver(url, 'acct-1-2', { amount: 2 }, { key: 'acct-1', seq: 2 });
    expect(redelivered.status).toBe(200);
    expect(redelivered.body.status).toBe('duplicate');
    expect(await ledgerOf('acct-1')).toEqual([1, 2, 3]);
  });

  it('--help for every command, readable tables without --json, and failures exit 1', async () => {
    const commands = [
      ['migrate'],
      ['status'],
      ['dead', 'list'],
      ['dead', 'show'],
      ['dead', 'replay'],
      ['dead', 'skip'],
      ['keys', 'list'],
      ['keys', 'show'],
      ['keys', 'unblock'],
      ['keys', 'skip'],
      ['prune'],
    ];
    const helps = await Promise.all([cli(['--help']), ...commands.map((c) => cli([...c, '--help']))]);
    for (const [i, h] of helps.entries()) {
      expect(h.code, `help ${i}`).toBe(0);
      expect(h.stdout).toContain('Usage: webhook-inbox');
      expect(h.stdout).toContain('Exit codes:');
    }
    expect(helps[5].stdout).toContain('not a bypass');

    expect((await cli(['migrate', '--schema', t.schema])).code).toBe(0);
    const [table, statusText, missingTables, unreachable] = await Promise.all([
      cli(['dead', 'list', '--schema', t.schema]),
      cli(['status', '--schema', t.schema]),
      cliAsProcess(['keys', 'list', '--schema', `${t.schema}_none`, '--json']),
      cliAsProcess(['status', '--db', 'postgres://postgres@127.0.0.1:1/test', '--json']),
    ]);
    expect(table.stdout.trim()).toBe('(none)');
    expect(statusText.stdout).toMatch(/events: +pending 0 +held 0 +processed 0 +dead 0/);
    expect(missingTables.code).toBe(1);
    expect(JSON.parse(missingTables.stderr).error.message).toContain('webhook-inbox migrate');
    expect(unreachable.code).toBe(1);
    expect(JSON.parse(unreachable.stderr).error.message).toContain('cannot connect');
  });
});
