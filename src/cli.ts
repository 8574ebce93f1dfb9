#!/usr/bin/env node
/**
 * `webhook-inbox`: the operator's command line. It talks to the inbox tables directly (no
 * handler, every source unless --source narrows it): replays are re-queued and applied by the
 * application's sweeper, through the same path as every other event.
 */
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { formatDuration, parseDuration } from './duration.js';
import { OperationError } from './errors.js';
import { migrateToLatest } from './migrations.js';
import type { DeadLetter, KeySummary, ReplayResult } from './operations.js';
import { openOperations } from './operations.js';

/** Exit codes a script can rely on. */
export const EXIT = Object.freeze({
  ok: 0,
  /** The database could not be reached, the tables are missing, a statement failed. */
  failure: 1,
  /** Bad command line; nothing was changed. */
  usage: 2,
  /** The id or key does not exist. */
  notFound: 3,
  /** It exists, but the action does not apply in its state (nothing was changed). */
  refused: 4,
} as const);

class UsageError extends Error {}

type OptionSpec = { type: 'string' | 'boolean'; short?: string };
type Values = Record<string, string | boolean | undefined>;

interface Out {
  json: boolean;
  print(text: string): void;
}

interface Command {
  readonly summary: string;
  readonly usage: string;
  readonly help?: string;
  readonly options?: Record<string, OptionSpec & { help: string }>;
  /** Allowed number of positional arguments. */
  readonly positionals: readonly [min: number, max: number];
  run(args: { values: Values; positionals: string[]; out: Out; connection: Connection }): Promise<number>;
}

const GLOBAL_OPTIONS: Record<string, OptionSpec & { help: string }> = {
  db: { type: 'string', help: 'PostgreSQL connection string (default: $DATABASE_URL)' },
  schema: { type: 'string', help: "schema of the inbox tables (default: 'webhook_inbox')" },
  'table-prefix': { type: 'string', help: "prefix of the inbox table names (default: '')" },
  source: { type: 'string', help: 'act on this source only (default: every source)' },
  json: { type: 'boolean', help: 'machine-readable output on stdout' },
  help: { type: 'boolean', short: 'h', help: 'show help' },
};

const FILTERS: Record<string, OptionSpec & { help: string }> = {
  key: { type: 'string', help: 'only this ordering key' },
  reason: { type: 'string', help: "only this dead reason ('poison', 'late')" },
  'older-than': { type: 'string', help: 'received longer ago than this duration (7d, 12h, 30m)' },
  'newer-than': { type: 'string', help: 'received more recently than this duration' },
  limit: { type: 'string', help: 'at most this many (default 100; 1-10000)' },
};

// ---- argument checks (all before any change) ------------------------------------------------

function duration(values: Values, name: string): number | undefined {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const ms = parseDuration(raw);
  if (ms === undefined) {
    throw new UsageError(`--${name} must be a duration like 7d, 12h, 30m, 90s; got ${JSON.stringify(raw)}`);
  }
  return ms;
}

function limit(values: Values): number | undefined {
  const raw = values.limit;
  if (raw === undefined) return undefined;
  if (typeof raw !== 'string' || !/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > 10_000) {
    throw new UsageError(`--limit must be an integer from 1 to 10000; got ${JSON.stringify(raw)}`);
  }
  return Number(raw);
}

function filterOf(values: Values) {
  return {
    key: values.key as string | undefined,
    reason: values.reason as string | undefined,
    olderThan: duration(values, 'older-than'),
    newerThan: duration(values, 'newer-than'),
    limit: limit(values),
  };
}

// ---- output ---------------------------------------------------------------------------------

function table(headers: string[], rows: unknown[][]): string {
  if (rows.length === 0) return '(none)';
  const cells = [
    headers,
    ...rows.map((r) => r.map((c) => (c === null || c === undefined ? '-' : String(c)))),
  ];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => r[i].length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** JSON for scripts: without the payload, for lists. */
function deadLetterSummary(d: DeadLetter) {
  const { payload: _payload, ...rest } = d;
  return rest;
}

/** JSON for scripts: the payload as text when it is UTF-8, else base64. */
function deadLetterJson(d: DeadLetter) {
  let payload: string | null = null;
  let payloadEncoding: 'utf8' | 'base64' | null = null;
  if (d.payload) {
    try {
      payload = new TextDecoder('utf-8', { fatal: true }).decode(d.payload);
      payloadEncoding = 'utf8';
    } catch {
      payload = d.payload.toString('base64');
      payloadEncoding = 'base64';
    }
  }
  return { ...deadLetterSummary(d), payload, payloadEncoding };
}

function oneLine(text: string | null, max = 60): string | null {
  if (text === null) return null;
  const line = text.replace(/\s+/g, ' ');
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

function keyRows(keys: KeySummary[]): unknown[][] {
  return keys.map((k) => [
    k.source,
    k.key,
    k.state === 'blocked' ? `blocked at ${k.blockedSeq} (${k.blockedReason})` : 'open',
    k.nextSeq,
    k.heldCount,
    k.firstHeldSeq,
    formatDuration(k.oldestHeldAgeMs),
  ]);
}
const KEY_HEADERS = ['SOURCE', 'KEY', 'STATE', 'NEXT SEQ', 'HELD', 'FIRST HELD', 'OLDEST HELD'];

function replayExit(results: ReplayResult[]): number {
  if (results.some((r) => r.outcome === 'ambiguous')) return EXIT.usage;
  if (results.some((r) => r.outcome === 'not-found')) return EXIT.notFound;
  if (results.some((r) => r.outcome !== 'requeued')) return EXIT.refused;
  return EXIT.ok;
}

// ---- commands -------------------------------------------------------------------------------

interface Connection {
  ops(): ReturnType<typeof openOperations>;
}

const COMMANDS: Record<string, Command> = {
  migrate: {
    summary: 'create or update the inbox tables and functions',
    usage: 'webhook-inbox migrate [options]',
    positionals: [0, 0],
    async run({ out, connection }) {
      const ops = await connection.ops();
      const ran = await migrateToLatest(ops.db, ops.tables);
      const result = { migrated: true, schema: ops.tables.schema, tablePrefix: ops.tables.prefix, ran };
      out.print(
        out.json
          ? JSON.stringify(result)
          : `schema ${ops.tables.schema} is up to date${ran.length ? ` (ran ${ran.join(', ')})` : ' (nothing to run)'}`,
      );
      return EXIT.ok;
    },
  },
  status: {
    summary: 'counts by status, blocked keys, oldest held age, dead letters by reason',
    usage: 'webhook-inbox status [options]',
    positionals: [0, 0],
    async run({ out, connection }) {
      const s = await (await connection.ops()).status();
      if (out.json) {
        out.print(JSON.stringify(s));
        return EXIT.ok;
      }
      const e = s.events;
      out.print(
        [
          `sources:      ${s.sources.join(', ') || '(none)'}`,
          `events:       pending ${e.pending}  held ${e.held}  processed ${e.processed}  dead ${e.dead}`,
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
  'dead list': {
    summary: 'list dead letters, oldest first',
    usage:
      'webhook-inbox dead list [--key K] [--reason R] [--older-than D] [--newer-than D] [--limit N] [options]',
    options: FILTERS,
    positionals: [0, 0],
    async run({ values, out, connection }) {
      const filter = filterOf(values);
      const dead = await (await connection.ops()).deadLetters(filter);
      if (out.json) out.print(JSON.stringify(dead.map(deadLetterSummary)));
      else {
        out.print(
          table(
            ['SOURCE', 'ID', 'KEY', 'SEQ', 'REASON', 'ATTEMPTS', 'AGE', 'BLOCKING', 'LAST ERROR'],
            dead.map((d) => [
              d.source,
              d.id,
              d.key,
              d.seq,
              d.deadReason,
              d.attempts,
              formatDuration(d.ageMs),
              d.blocking ? 'yes' : 'no',
              oneLine(d.lastError),
            ]),
          ),
        );
      }
      return EXIT.ok;
    },
  },
  'dead show': {
    summary: 'one dead letter (or any stored event) with its payload and last error',
    usage: 'webhook-inbox dead show <id> [options]',
    positionals: [1, 1],
    async run({ positionals, out, connection }) {
      const d = await (await connection.ops()).deadLetter(positionals[0]);
      const json = deadLetterJson(d);
      if (out.json) {
        out.print(JSON.stringify(json));
        return EXIT.ok;
      }
      out.print(
        [
          `id:           ${d.id}`,
          `source:       ${d.source}`,
          `status:       ${d.status}${d.deadReason ? ` (${d.deadReason})` : ''}`,
          `key / seq:    ${d.key ?? '-'} / ${d.seq ?? '-'}${d.blocking ? '   (its key is blocked at this seq)' : ''}`,
          `attempts:     ${d.attempts}`,
          `received:     ${d.receivedAt.toISOString()} (${formatDuration(d.ageMs)} ago)`,
          `last error:   ${d.lastError ?? '-'}`,
          `payload (${json.payloadEncoding ?? 'none'}):`,
          json.payload ?? '-',
        ].join('\n'),
      );
      return EXIT.ok;
    },
  },
  'dead replay': {
    summary: "re-queue dead letters; the application's sweeper applies them in order",
    usage:
      'webhook-inbox dead replay <id>... | --all [--key K] [--reason R] [--older-than D] [--newer-than D] [--limit N]',
    help:
      'Replay is a re-queue, not a bypass: the event becomes waiting again (attempts reset), an\n' +
      "ordered one at its key's cursor (the key is unblocked when it was blocked at its seq), and\n" +
      'the running application applies it with its handler, in seq order. Fix the handler first.\n' +
      'An ordered event whose key moved past its seq is refused (it would apply out of order).',
    options: { all: { type: 'boolean', help: 'replay every dead letter matching the filters' }, ...FILTERS },
    positionals: [0, 1000],
    async run({ values, positionals, out, connection }) {
      const filter = filterOf(values);
      const filtered = Object.values(filter).some((v) => v !== undefined);
      if (values.all && positionals.length > 0) throw new UsageError('give ids, or --all, not both');
      if (!values.all && positionals.length === 0) throw new UsageError('give the ids to replay, or --all');
      if (!values.all && filtered)
        throw new UsageError('--key, --reason, --older-than, --newer-than and --limit need --all');
      const ops = await connection.ops();
      const results = values.all ? await ops.replay({ ...filter, all: true }) : await ops.replay(positionals);
      if (out.json) out.print(JSON.stringify(results));
      else {
        out.print(
          table(
            ['SOURCE', 'ID', 'KEY', 'SEQ', 'OUTCOME'],
            results.map((r) => [r.source, r.id, r.key, r.seq, r.outcome]),
          ),
        );
        const requeued = results.filter((r) => r.outcome === 'requeued').length;
        out.print(`${requeued} of ${results.length} re-queued; the application's sweeper applies them.`);
      }
      return replayExit(results);
    },
  },
  'dead skip': {
    summary: "skip a dead letter's seq: record it as a gap, unblock its key",
    usage: 'webhook-inbox dead skip <id> [options]',
    help:
      'The key moves past the dead letter\'s seq (recorded as a gap, reason "skip"); the running\n' +
      "application's sweeper then drains the events held behind it. The dead letter stays, as a record.",
    positionals: [1, 1],
    async run({ positionals, out, connection }) {
      const r = await (await connection.ops()).skip({ id: positionals[0] });
      out.print(
        out.json
          ? JSON.stringify(r)
          : `skipped seq ${r.fromSeq === r.toSeq ? r.fromSeq : `${r.fromSeq}-${r.toSeq}`} of key ${r.key} (${r.source}); it now waits for seq ${r.nextSeq}`,
      );
      return EXIT.ok;
    },
  },
  'keys list': {
    summary: 'keys that are blocked or hold events, longest waiting first',
    usage: 'webhook-inbox keys list [--blocked] [--limit N] [options]',
    options: {
      blocked: { type: 'boolean', help: 'only blocked keys' },
      limit: FILTERS.limit,
    },
    positionals: [0, 0],
    async run({ values, out, connection }) {
      const keys = await (await connection.ops()).keys({
        blocked: values.blocked === true,
        limit: limit(values),
      });
      out.print(out.json ? JSON.stringify(keys) : table(KEY_HEADERS, keyRows(keys)));
      return EXIT.ok;
    },
  },
  'keys show': {
    summary: 'one key: cursor, state, held seqs, gaps, dead letters',
    usage: 'webhook-inbox keys show <key> [options]',
    positionals: [1, 1],
    async run({ positionals, out, connection }) {
      const k = await (await connection.ops()).key(positionals[0]);
      if (!k) throw new OperationError('not-found', `no key ${JSON.stringify(positionals[0])}`);
      if (out.json) {
        out.print(JSON.stringify({ ...k, deadLetters: k.deadLetters.map(deadLetterSummary) }));
        return EXIT.ok;
      }
      out.print(
        [
          table(KEY_HEADERS, keyRows([k])),
          `held seqs:    ${k.heldSeqs.join(', ') || '-'}`,
          `gaps:         ${k.gaps.map((g) => `${g.fromSeq === g.toSeq ? g.fromSeq : `${g.fromSeq}-${g.toSeq}`} (${g.reason})`).join(', ') || '-'}`,
          `dead letters: ${k.deadLetters.map((d) => `${d.id} seq ${d.seq} (${d.deadReason})`).join(', ') || '-'}`,
        ].join('\n'),
      );
      return EXIT.ok;
    },
  },
  'keys unblock': {
    summary: 'reopen a blocked key without moving its cursor',
    usage: 'webhook-inbox keys unblock <key> [options]',
    help:
      'What waits at the cursor is then applied by the sweeper. If nothing does (a missing seq, a\n' +
      'dead letter you did not replay), the key waits for it again and the gap timeout decides.\n' +
      'To move past the seq, use `keys skip`; to retry a dead letter, `dead replay`.',
    positionals: [1, 1],
    async run({ positionals, out, connection }) {
      const k = await (await connection.ops()).unblock(positionals[0]);
      out.print(
        out.json ? JSON.stringify(k) : `key ${k.key} (${k.source}) is open; it waits for seq ${k.nextSeq}`,
      );
      return EXIT.ok;
    },
  },
  'keys skip': {
    summary: 'move a blocked key past what blocks it (a poison seq, or a missing range)',
    usage: 'webhook-inbox keys skip <key> [options]',
    positionals: [1, 1],
    async run({ positionals, out, connection }) {
      const r = await (await connection.ops()).skip({ key: positionals[0] });
      out.print(
        out.json
          ? JSON.stringify(r)
          : `skipped seq ${r.fromSeq === r.toSeq ? r.fromSeq : `${r.fromSeq}-${r.toSeq}`} of key ${r.key} (${r.source}); it now waits for seq ${r.nextSeq}`,
      );
      return EXIT.ok;
    },
  },
  prune: {
    summary: 'delete processed events older than a duration (never held or dead ones, never keys)',
    usage: 'webhook-inbox prune [--older-than 7d] [--dry-run] [options]',
    options: {
      'older-than': { type: 'string', help: 'processed longer ago than this (default 7d)' },
      'dry-run': { type: 'boolean', help: 'count what would be pruned; delete nothing' },
    },
    positionals: [0, 0],
    async run({ values, out, connection }) {
      const olderThan = duration(values, 'older-than') ?? 7 * 86_400_000;
      const r = await (await connection.ops()).prune({ olderThan, dryRun: values['dry-run'] === true });
      out.print(
        out.json
          ? JSON.stringify(r)
          : `${r.dryRun ? 'would prune' : 'pruned'} ${r.pruned} processed events older than ${formatDuration(olderThan)} (before ${r.cutoff.toISOString()})`,
      );
      return EXIT.ok;
    },
  },
};

function optionHelp(options: Record<string, OptionSpec & { help: string }>): string {
  return Object.entries(options)
    .map(([name, o]) => {
      const flag = `${o.short ? `-${o.short}, ` : '    '}--${name}${o.type === 'string' ? ' <value>' : ''}`;
      return `  ${flag.padEnd(28)} ${o.help}`;
    })
    .join('\n');
}

const EXIT_HELP = `Exit codes:
  0  done
  1  operational failure (database unreachable, tables missing, a statement failed)
  2  usage error (nothing was changed)
  3  not found (no such id or key)
  4  refused: it exists, but the action does not apply in its state (nothing was changed)`;

function topHelp(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length));
  return [
    'webhook-inbox: operate a webhook inbox (dead letters, blocked keys, retention).',
    '',
    'Usage: webhook-inbox <command> [arguments] [options]',
    '',
    'Commands:',
    ...Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`),
    '',
    'Options (every command):',
    optionHelp(GLOBAL_OPTIONS),
    '',
    EXIT_HELP,
    '',
    'Run `webhook-inbox <command> --help` for a command.',
  ].join('\n');
}

function commandHelp(name: string, c: Command): string {
  return [
    `webhook-inbox ${name}: ${c.summary}`,
    '',
    `Usage: ${c.usage}`,
    ...(c.help ? ['', c.help] : []),
    ...(c.options ? ['', 'Options:', optionHelp(c.options)] : []),
    '',
    'Options (every command):',
    optionHelp(GLOBAL_OPTIONS),
    '',
    EXIT_HELP,
  ].join('\n');
}

function describeFailure(err: unknown, schema: string): string {
  const code = err && typeof err === 'object' && 'code' in err ? String(err.code) : '';
  if (code === '42P01' || code === '42883' || code === '3F000') {
    return `the inbox tables are not in schema ${JSON.stringify(schema)}: run \`webhook-inbox migrate\` (or pass --schema / --table-prefix)`;
  }
  if (['ECONNREFUSED', 'ENOTFOUND', 'ETIMEDOUT', 'EAI_AGAIN', '28P01', '28000', '3D000'].includes(code)) {
    return `cannot connect to the database (${code}): ${err instanceof Error ? err.message : String(err)}`;
  }
  return err instanceof Error ? err.message : String(err);
}

/** Runs one command line; returns the exit code. Output goes to `stdout` and `stderr`. */
export async function main(
  argv: readonly string[],
  env: Record<string, string | undefined> = process.env,
  io: { stdout(text: string): void; stderr(text: string): void } = {
    stdout: (text) => process.stdout.write(`${text}\n`),
    stderr: (text) => process.stderr.write(`${text}\n`),
  },
): Promise<number> {
  const json = argv.includes('--json');
  const fail = (code: number, kind: string, message: string) => {
    if (json) io.stderr(JSON.stringify({ error: { code: kind, message }, exitCode: code }));
    else io.stderr(`webhook-inbox: ${message}`);
    return code;
  };
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    io.stdout(topHelp());
    return argv.length === 0 ? EXIT.usage : EXIT.ok;
  }
  const name = argv[0] === 'dead' || argv[0] === 'keys' ? `${argv[0]} ${argv[1] ?? ''}`.trim() : argv[0];
  const command = COMMANDS[name];
  if (!command) {
    const group = argv[0] === 'dead' || argv[0] === 'keys' ? argv[0] : undefined;
    if (group && (argv[1] === undefined || argv[1] === '--help' || argv[1] === '-h')) {
      io.stdout(
        Object.entries(COMMANDS)
          .filter(([n]) => n.startsWith(`${group} `))
          .map(([n, c]) => `webhook-inbox ${n.padEnd(14)} ${c.summary}`)
          .join('\n'),
      );
      return argv[1] === undefined ? EXIT.usage : EXIT.ok;
    }
    return fail(
      EXIT.usage,
      'usage',
      `unknown command ${JSON.stringify(argv.slice(0, group ? 2 : 1).join(' '))}; run \`webhook-inbox --help\``,
    );
  }
  const rest = argv.slice(name.split(' ').length);
  let values: Values;
  let positionals: string[];
  try {
    const options = Object.fromEntries(
      Object.entries({ ...GLOBAL_OPTIONS, ...command.options }).map(([k, { type, short }]) => [
        k,
        short ? { type, short } : { type },
      ]),
    );
    ({ values, positionals } = parseArgs({
      args: [...rest],
      options,
      allowPositionals: true,
      strict: true,
    }) as {
      values: Values;
      positionals: string[];
    });
  } catch (err) {
    return fail(EXIT.usage, 'usage', `${(err as Error).message}\nusage: ${command.usage}`);
  }
  if (values.help) {
    io.stdout(commandHelp(name, command));
    return EXIT.ok;
  }
  const [min, max] = command.positionals;
  if (positionals.length < min || positionals.length > max) {
    const what =
      max === 0
        ? 'takes no arguments'
        : `takes ${min === max ? min : `${min} to ${max}`} argument${max === 1 ? '' : 's'}`;
    return fail(EXIT.usage, 'usage', `${name} ${what}; got ${positionals.length}\nusage: ${command.usage}`);
  }
  const db = (values.db as string | undefined) ?? env.DATABASE_URL;
  if (!db) return fail(EXIT.usage, 'usage', 'no database: pass --db <url> or set DATABASE_URL');
  const schema = (values.schema as string | undefined) ?? 'webhook_inbox';
  const prefix = (values['table-prefix'] as string | undefined) ?? '';
  if (!/^[a-z_][a-z0-9_]{0,39}$/.test(schema)) {
    return fail(
      EXIT.usage,
      'usage',
      `--schema must be a lower-case SQL identifier; got ${JSON.stringify(schema)}`,
    );
  }
  if (prefix !== '' && !/^[a-z_][a-z0-9_]{0,39}$/.test(prefix)) {
    return fail(
      EXIT.usage,
      'usage',
      `--table-prefix must be a lower-case SQL identifier; got ${JSON.stringify(prefix)}`,
    );
  }
  const source = values.source as string | undefined;
  if (source !== undefined && !/^[\x21-\x7e]{1,100}$/.test(source)) {
    return fail(
      EXIT.usage,
      'usage',
      `--source must be 1-100 printable ASCII characters; got ${JSON.stringify(source)}`,
    );
  }
  let opened: Awaited<ReturnType<typeof openOperations>> | undefined;
  const connection: Connection = {
    async ops() {
      opened ??= await openOperations({ db, schema, tablePrefix: prefix, source });
      return opened;
    },
  };
  try {
    return await command.run({ values, positionals, out: { json, print: io.stdout }, connection });
  } catch (err) {
    if (err instanceof UsageError)
      return fail(EXIT.usage, 'usage', `${err.message}\nusage: ${command.usage}`);
    if (err instanceof OperationError) {
      const code =
        err.code === 'not-found' ? EXIT.notFound : err.code === 'ambiguous' ? EXIT.usage : EXIT.refused;
      return fail(code, err.code, err.message);
    }
    return fail(EXIT.failure, 'failure', describeFailure(err, schema));
  } finally {
    await opened?.close().catch(() => {});
  }
}

// Run when executed (the package's bin, `node dist/src/cli.js`, `tsx src/cli.ts`), not when imported.
const invokedDirectly = (() => {
  try {
    return !!process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href;
  } catch {
    return false;
  }
})();

if (invokedDirectly) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err) => {
      process.stderr.write(`webhook-inbox: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = EXIT.failure;
    },
  );
}
