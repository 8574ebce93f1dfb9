/** What an inbox says as it starts: a retention shorter than providers retry, a failed start's fix. */
import type { Database } from '../db/database.js';
import { missingTables } from '../db/drivers/postgres-error.js';
import { InboxError, InboxStartError } from '../errors.js';
import type { ResolvedOptions } from '../runtime/resolved-options.js';

const SHORT_RETENTION_MS = 3 * 86_400_000;
let warnedShortRetention = false;

/** Processed rows pruned sooner than a sender retries: a redelivery of an unordered event applies again. */
export function warnIfRetentionIsShort({ retention, logger, source }: ResolvedOptions): void {
  if (retention === false || retention >= SHORT_RETENTION_MS) return;
  const message =
    `webhook-inbox: retention is ${retention} ms, shorter than 3 days: senders that retry for longer ` +
    '(Stripe retries for 3 days) can redeliver an unordered event after its row was pruned, and it would be applied again';
  logger.warn({ retention, source }, message);
  if (!warnedShortRetention) {
    warnedShortRetention = true;
    process.emitWarning(message, 'WebhookInboxWarning');
  }
}

const UNREACHABLE = 'is the database running, and is `db` its address?';

/** The fix of a start that failed, by what failed: its SQLSTATE or its network error's code. */
const FIXES: Record<string, string> = {
  ECONNREFUSED: UNREACHABLE,
  ENOTFOUND: UNREACHABLE,
  EAI_AGAIN: UNREACHABLE,
  ETIMEDOUT: UNREACHABLE,
  '28P01': "the password in `db` is not the role's",
  '28000': 'the server refused the role in `db`: check its name, and pg_hba.conf',
  '3D000': 'the database `db` names does not exist: create it (createdb), or fix `db`',
  '42501':
    "the role in `db` may not create the inbox's schema: grant it CREATE, or run `webhook-inbox migrate` as the owner and set `migrate: false`",
};

function startHint(err: unknown): string {
  const text =
    err instanceof Error
      ? /^error$/i.test(err.name)
        ? err.message
        : `${err.name}: ${err.message}`
      : String(err);
  if (missingTables(err))
    return `${text} (the inbox's tables are missing: run \`webhook-inbox migrate\`, or leave \`migrate\` on)`;
  const code = (err as { code?: unknown } | null)?.code;
  const fix = typeof code === 'string' ? FIXES[code] : undefined;
  return fix ? `${text} (${fix})` : text;
}

/** A failed start as `ready()` rejects with it; a closed inbox did not fail to start (`closed`). */
export function startError(err: unknown): InboxError {
  if (err instanceof InboxStartError || (err instanceof InboxError && err.code === 'closed')) return err;
  return new InboxStartError(startHint(err), { cause: err });
}

/** Which database the inbox opened, without a password or parameters. */
function databaseShown(o: ResolvedOptions, database: Database): string {
  if (typeof o.db === 'string') {
    try {
      const url = new URL(o.db);
      const user = url.username ? `${url.username}@` : '';
      return `${url.protocol}//${user}${url.host}${url.pathname}`;
    } catch {
      return 'a postgres:// connection string';
    }
  }
  if (o.db === undefined) return o.dataDir === undefined ? 'PGlite in memory' : `PGlite in ${o.dataDir}`;
  if (database.kind === 'pglite') return 'a PGlite instance';
  return database.pool ? 'a pg.Pool' : 'a Kysely instance';
}

/** The one line a start says, at `notice` (after failed starts, a warning: the outage is over). */
export function sayReady(o: ResolvedOptions, database: Database, failedStarts: number): void {
  const fields = {
    source: o.source,
    schema: o.schema,
    tablePrefix: o.tablePrefix || undefined,
    mode: o.mode,
    db: databaseShown(o, database),
    failedStarts: failedStarts || undefined,
  };
  (failedStarts > 0 ? o.logger.warn : o.logger.notice)(fields, 'webhook-inbox: ready');
}
