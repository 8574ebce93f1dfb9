/** The command line's options, each checked before anything is opened; a bad one is a UsageError naming it. */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { parseDuration } from '../duration.js';
import { DEAD_REASONS } from '../operations/dead-letters.js';
import { type OpenOperationsOptions, parseInstant } from '../operations/index.js';
import { HEADER_NAME, IDENTIFIER } from '../options/option-checks.js';
import {
  type Command,
  type CommandArgs,
  EXIT,
  type OpenedOperations,
  type OptionSpec,
  UsageError,
  type Values,
} from './command.js';

export const GLOBAL_OPTIONS: Record<string, OptionSpec> = {
  db: { type: 'string', help: 'PostgreSQL connection URL (default: $DATABASE_URL)' },
  'data-dir': {
    type: 'string',
    help: "an embedded PGlite database on disk (the inbox's dataDir) instead of --db",
  },
  schema: {
    type: 'string',
    help: "schema of the inbox tables (default: $WEBHOOK_INBOX_SCHEMA, else 'webhook_inbox')",
  },
  'table-prefix': {
    type: 'string',
    help: "prefix of the inbox table names (default: $WEBHOOK_INBOX_TABLE_PREFIX, else '')",
  },
  source: {
    type: 'string',
    help: 'act on this source only (default: $WEBHOOK_INBOX_SOURCE, else every source)',
  },
  'secret-headers': {
    type: 'string',
    help: 'more headers never shown (and removed by scrub-headers), comma-separated, besides the built-in ones',
  },
  json: { type: 'boolean', help: 'machine-readable output on stdout' },
  help: { type: 'boolean', short: 'h', help: 'show help' },
};

export const FILTERS: Record<string, OptionSpec> = {
  key: {
    type: 'string',
    help: "only this ordering key, or with a trailing * every key it starts ('acct_*')",
  },
  reason: { type: 'string', help: `only this dead reason (${DEAD_REASONS.join(', ')})` },
  cause: { type: 'string', help: 'only this cause (a fingerprint `dead groups` lists)' },
  type: { type: 'string', help: "only this event type ('invoice.paid')" },
  since: {
    type: 'string',
    help: 'failed at or after: ISO 8601 (2026-11-28T10:00Z), a time today in UTC (10:00) or a duration ago (2h)',
  },
  until: { type: 'string', help: 'failed before (as --since)' },
  'older-than': { type: 'string', help: 'received longer ago than this duration (7d, 12h, 30m)' },
  'newer-than': { type: 'string', help: 'received more recently than this duration' },
  limit: { type: 'string', help: 'at most this many (default 100; 1-10000)' },
};

export function duration(values: Values, name: string): number | undefined {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const ms = parseDuration(raw);
  if (ms === undefined) {
    throw new UsageError(`--${name} must be a duration like 7d, 12h, 30m, 90s; got ${JSON.stringify(raw)}`);
  }
  return ms;
}

/** The application's `retention`: the flag, else WEBHOOK_INBOX_RETENTION, else 7d; `false`/`off`: none. */
export function retentionOf(
  values: Values,
  flag: string,
  env: Record<string, string | undefined>,
): number | false {
  const given = duration(values, flag);
  if (given !== undefined) return given;
  const raw = env.WEBHOOK_INBOX_RETENTION;
  if (raw === undefined || raw === '') return 7 * 86_400_000;
  if (raw === 'false' || raw === 'off') return false;
  const ms = parseDuration(raw);
  if (ms === undefined || ms < 1000) {
    throw new UsageError(
      `WEBHOOK_INBOX_RETENTION must be a duration like 7d, 36h (as the inbox's retention option), or false; got ${JSON.stringify(raw)}`,
    );
  }
  return ms;
}

export const LOCK_TIMEOUT: OptionSpec = {
  type: 'string',
  help: 'how long to wait for a key a delivery or a drain holds before giving up (default 5s)',
};

export function lockTimeout(values: Values): number | undefined {
  return duration(values, 'lock-timeout');
}

/** An action on one named thing that waits for its key: one positional and `--lock-timeout`. */
export function lockedAction(
  act: (
    ops: OpenedOperations,
    target: string,
    bound: { lockTimeoutMs: number | undefined },
    out: CommandArgs['out'],
  ) => Promise<void>,
): Pick<Command, 'options' | 'positionals' | 'check' | 'run'> {
  return {
    options: { 'lock-timeout': LOCK_TIMEOUT },
    positionals: [1, 1],
    check({ values }) {
      lockTimeout(values);
    },
    async run({ values, positionals, out, connection }) {
      await act(
        await connection.ops(),
        positionals[0] as string,
        { lockTimeoutMs: lockTimeout(values) },
        out,
      );
      return EXIT.ok;
    },
  };
}

export function limit(values: Values): number | undefined {
  const raw = values.limit;
  if (raw === undefined) return undefined;
  if (typeof raw !== 'string' || !/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > 10_000) {
    throw new UsageError(`--limit must be an integer from 1 to 10000; got ${JSON.stringify(raw)}`);
  }
  return Number(raw);
}

function reason(values: Values): string | undefined {
  const raw = values.reason as string | undefined;
  if (raw !== undefined && !(DEAD_REASONS as readonly string[]).includes(raw)) {
    throw new UsageError(`--reason must be one of ${DEAD_REASONS.join(', ')}; got ${JSON.stringify(raw)}`);
  }
  return raw;
}

/** `--since` / `--until`, pinned to now once (so a dry run and its action agree). */
function instant(values: Values, name: 'since' | 'until', now: Date): Date | undefined {
  const raw = values[name];
  if (typeof raw !== 'string') return undefined;
  const at = parseInstant(raw, now);
  if (!at) {
    throw new UsageError(
      `--${name} must be an ISO 8601 time (2026-11-28T10:00:00Z), a time of today in UTC (10:00) or a duration ago (2h); got ${JSON.stringify(raw)}`,
    );
  }
  return at;
}

const CAUSE = /^[0-9a-f]{12}$/;

/** The dead-letter selection of `dead list|groups|replay|skip|purge`. */
export function filterOf(values: Values, now: Date = new Date()) {
  const cause = values.cause as string | undefined;
  if (cause !== undefined && !CAUSE.test(cause)) {
    throw new UsageError(
      `--cause must be a cause as \`dead groups\` lists it (12 hex characters); got ${JSON.stringify(cause)}`,
    );
  }
  const since = instant(values, 'since', now);
  const until = instant(values, 'until', now);
  if (since && until && since >= until) throw new UsageError('--since must be before --until');
  return {
    key: values.key as string | undefined,
    reason: reason(values),
    cause,
    type: values.type as string | undefined,
    since,
    until,
    olderThan: duration(values, 'older-than'),
    newerThan: duration(values, 'newer-than'),
    limit: limit(values),
  };
}

function redacted(url: string): string {
  return url.replace(/\/\/([^:/@]*):[^@]*@/, '//$1:***@');
}

/** A postgres:// URL: anything else would fail later as ENOTFOUND. */
function databaseUrl(raw: string, name: string): string {
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {}
  if (!url || (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:')) {
    throw new UsageError(
      `${name} must be a PostgreSQL URL like postgres://user@host:5432/db; got ${JSON.stringify(redacted(raw))}`,
    );
  }
  return raw;
}

/** An existing embedded database; only `migrate` creates one, and only in a missing or empty directory. */
function dataDirectory(dir: string, creates: boolean): string {
  if (dir === '') throw new UsageError('--data-dir must be a directory path; got ""');
  const exists = existsSync(dir);
  if (exists && !statSync(dir).isDirectory()) {
    throw new UsageError(`--data-dir ${JSON.stringify(dir)} is not a directory`);
  }
  const holdsDatabase = exists && existsSync(`${dir}/PG_VERSION`);
  if (holdsDatabase) return dir;
  if (!creates) {
    throw new UsageError(
      `--data-dir ${JSON.stringify(dir)} holds no embedded database; create one with \`webhook-inbox migrate --data-dir ${dir}\`, or check the path`,
    );
  }
  if (exists && readdirSync(dir).length > 0) {
    throw new UsageError(
      `--data-dir ${JSON.stringify(dir)} is not empty and holds no embedded database; give an empty or new directory`,
    );
  }
  return dir;
}

export function connectionOptions(
  values: Values,
  env: Record<string, string | undefined>,
  command: string,
): OpenOperationsOptions {
  // The flag, else the application's environment (one configuration for app and CLI).
  const from = (flag: string, variable: string) =>
    values[flag] !== undefined
      ? { value: values[flag] as string, name: `--${flag}` }
      : env[variable] !== undefined && env[variable] !== ''
        ? { value: env[variable] as string, name: variable }
        : undefined;
  const schemaGiven = from('schema', 'WEBHOOK_INBOX_SCHEMA');
  const prefixGiven = from('table-prefix', 'WEBHOOK_INBOX_TABLE_PREFIX');
  const sourceGiven = from('source', 'WEBHOOK_INBOX_SOURCE');
  const schema = schemaGiven?.value ?? 'webhook_inbox';
  const tablePrefix = prefixGiven?.value ?? '';
  if (!IDENTIFIER.test(schema)) {
    throw new UsageError(
      `${schemaGiven?.name ?? '--schema'} must be a lower-case SQL identifier; got ${JSON.stringify(schema)}`,
    );
  }
  if (tablePrefix !== '' && !IDENTIFIER.test(tablePrefix)) {
    throw new UsageError(
      `${prefixGiven?.name ?? '--table-prefix'} must be a lower-case SQL identifier; got ${JSON.stringify(tablePrefix)}`,
    );
  }
  const source = sourceGiven?.value;
  if (source !== undefined && !/^[\x21-\x7e]{1,100}$/.test(source)) {
    throw new UsageError(
      `${sourceGiven!.name} must be 1-100 printable ASCII characters; got ${JSON.stringify(source)}`,
    );
  }
  const secretHeaders = ((values['secret-headers'] as string | undefined) ?? '')
    .split(',')
    .map((name) => name.trim().toLowerCase())
    .filter((name) => name !== '');
  const bad = secretHeaders.find((name) => !HEADER_NAME.test(name));
  if (bad !== undefined) {
    throw new UsageError(
      `--secret-headers must be header names, comma-separated; got ${JSON.stringify(bad)}`,
    );
  }
  const where = { schema, tablePrefix, source, secretHeaders };
  const dataDir = values['data-dir'] as string | undefined;
  const db = values.db as string | undefined;
  if (dataDir !== undefined) {
    if (db !== undefined) throw new UsageError('give --db or --data-dir, not both');
    return { ...where, dataDir: dataDirectory(dataDir, command === 'migrate') };
  }
  if (db !== undefined) return { ...where, db: databaseUrl(db, '--db') };
  if (env.DATABASE_URL) return { ...where, db: databaseUrl(env.DATABASE_URL, 'DATABASE_URL') };
  throw new UsageError('no database: pass --db <url> or --data-dir <dir>, or set DATABASE_URL');
}
