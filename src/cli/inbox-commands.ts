/** Commands on the inbox as a whole: its tables, its status, its retention. */

import { migrateToLatest, migrationScript, pendingMigrations } from '../db/migrations.js';
import { formatDuration } from '../duration.js';
import { docsUrl } from '../outcome.js';
import { TABLE_NAME } from '../runtime/resolve-options.js';
import { retentionOf } from './arguments.js';
import { type Command, EXIT, UsageError } from './command.js';

export const INBOX_COMMANDS: Record<string, Command> = {
  migrate: {
    summary: 'create or update the inbox tables and functions (--sql: print it; --check: is it current?)',
    usage: 'webhook-inbox migrate [--sql | --check] [options]',
    help:
      'Deploy gates for DBAs and CI/CD:\n' +
      '  --sql    prints the SQL of the pending migrations (one transaction, with the ledger rows the\n' +
      '           application looks for), runs nothing; prints nothing when the database is current.\n' +
      '  --check  exits 0 when the database is current, 1 when migrations are pending (it names\n' +
      '           them), and changes nothing.\n' +
      `\nOn a Citus cluster (${docsUrl('citus.md')}), as the option \`citus\` does at start:\n` +
      '  --citus  then distributes the events, keys and gaps tables by stream, colocated (once: a\n' +
      '           table already distributed is left alone). Connect --db to the coordinator.\n' +
      '  --colocate-with <table>  colocates them with your distributed table (implies --citus).',
    options: {
      sql: { type: 'boolean', help: 'print the pending SQL; run nothing' },
      check: { type: 'boolean', help: 'exit 1 when migrations are pending; run nothing' },
      citus: { type: 'boolean', help: 'distribute the tables on a Citus coordinator' },
      'colocate-with': {
        type: 'string',
        help: "a distributed table of yours holding the events' keys ('orders', 'public.orders')",
      },
    },
    positionals: [0, 0],
    check({ values }) {
      if (values.sql && values.check) throw new UsageError('give --sql or --check, not both');
      const colocateWith = values['colocate-with'];
      if (colocateWith !== undefined && !TABLE_NAME.test(colocateWith as string)) {
        throw new UsageError(
          `--colocate-with must name a distributed table, as table or schema.table in lower case; got ${JSON.stringify(colocateWith)}`,
        );
      }
      if ((values.citus || colocateWith !== undefined) && (values.sql || values.check)) {
        throw new UsageError(
          `--${values.citus ? 'citus' : 'colocate-with'} distributes the tables as it migrates: give it without --sql or --check`,
        );
      }
    },
    async run({ values, out, io, connection }) {
      const ops = await connection.ops();
      if (values.sql || values.check) {
        const pending = await pendingMigrations(ops.db, ops.tables);
        if (values.sql) {
          const script = migrationScript(ops.tables, pending);
          if (out.json) out.result({ pending, sql: script }, () => script);
          else if (script) io.raw(Buffer.from(script));
          return EXIT.ok;
        }
        out.result(
          {
            current: pending.length === 0,
            schema: ops.tables.schema,
            tablePrefix: ops.tables.prefix,
            pending,
          },
          (r) =>
            r.current
              ? `schema ${r.schema} is up to date`
              : `schema ${r.schema} has ${pending.length} pending migration${pending.length === 1 ? '' : 's'}: ${pending.join(', ')}`,
        );
        return pending.length === 0 ? EXIT.ok : EXIT.failure;
      }
      const colocateWith = values['colocate-with'] as string | undefined;
      const citus =
        values.citus || colocateWith !== undefined ? (colocateWith ? { colocateWith } : {}) : undefined;
      const ran = await migrateToLatest(ops.db, ops.tables, citus);
      const result = { migrated: true, schema: ops.tables.schema, tablePrefix: ops.tables.prefix, ran };
      out.result(
        result,
        (r) =>
          `schema ${r.schema} is up to date${ran.length ? ` (ran ${ran.join(', ')})` : ' (nothing to run)'}${citus ? ', its tables distributed by stream' : ''}`,
      );
      return EXIT.ok;
    },
  },
  status: {
    summary: 'counts by status, blocked keys, oldest held age, dead letters by reason',
    usage: 'webhook-inbox status [options]',
    positionals: [0, 0],
    async run({ out, connection }) {
      const status = await (await connection.ops()).status();
      out.result(status, (s) =>
        [
          `sources:      ${s.sources.join(', ') || '(none)'}`,
          `events:       pending ${s.events.pending}  held ${s.events.held}  processed ${s.processedIsEstimate ? '~' : ''}${s.events.processed}  dead ${s.events.dead}`,
          `keys:         ${s.keys.blocked} blocked, ${s.keys.holding} holding events`,
          `oldest held:  ${formatDuration(s.oldestHeldAgeMs)}`,
          `oldest pending: ${formatDuration(s.oldestPendingAgeMs)}`,
          `dead letters: ${
            Object.entries(s.deadByReason)
              .map(([reason, n]) => `${reason} ${n}`)
              .join(', ') || 'none'
          }`,
        ].join('\n'),
      );
      return EXIT.ok;
    },
  },
  'scrub-headers': {
    summary: 'remove secret headers (tokens, signatures) from the headers stored with events',
    usage: 'webhook-inbox scrub-headers [--secret-headers a,b] [--dry-run] [options]',
    help:
      "Removes authorization, proxy-authorization, cookie, x-gitlab-token and every preset's\n" +
      'signature header, and those named by --secret-headers, from rows stored before (an earlier\n' +
      'version stored x-gitlab-token with held, pending and dead events). Run it once after an\n' +
      "upgrade, and again after adding a name to the inbox's secretHeaders. Only the headers\n" +
      'change; rows a delivery holds meanwhile are left and counted as remaining: run it again.',
    options: {
      'dry-run': { type: 'boolean', help: 'count the rows that hold one; change nothing' },
    },
    positionals: [0, 0],
    async run({ values, out, connection }) {
      const result = await (await connection.ops()).scrubHeaders({ dryRun: values['dry-run'] === true });
      out.result(
        result,
        (r) =>
          `${r.dryRun ? 'would scrub' : 'scrubbed'} ${r.scrubbed} events${r.remaining > 0 ? ` (${r.remaining} held by a delivery meanwhile: run it again)` : ''}; headers: ${r.headers.join(', ')}`,
      );
      return EXIT.ok;
    },
  },
  prune: {
    summary: 'delete processed events older than a duration (never held or dead ones, never keys)',
    usage: 'webhook-inbox prune [--older-than 7d] [--dry-run] [options]',
    options: {
      'older-than': {
        type: 'string',
        help: 'processed longer ago than this (default: $WEBHOOK_INBOX_RETENTION, else 7d)',
      },
      'dry-run': { type: 'boolean', help: 'count what would be pruned; delete nothing' },
    },
    positionals: [0, 0],
    check({ values, env }) {
      if (retentionOf(values, 'older-than', env) === false) {
        throw new UsageError('WEBHOOK_INBOX_RETENTION is false (nothing is pruned): give --older-than');
      }
    },
    async run({ values, env, out, connection }) {
      const olderThan = retentionOf(values, 'older-than', env) as number;
      const result = await (await connection.ops()).prune({ olderThan, dryRun: values['dry-run'] === true });
      out.result(
        result,
        (r) =>
          `${r.dryRun ? 'would prune' : 'pruned'} ${r.pruned} processed events older than ${formatDuration(olderThan)} (before ${r.cutoff.toISOString()})`,
      );
      return EXIT.ok;
    },
  },
};
