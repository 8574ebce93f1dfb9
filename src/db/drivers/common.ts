import { createHash } from 'node:crypto';
import type { QueryResult, TransactionSettings } from 'kysely';
import { PoolWaitTimeoutError } from '../../errors.js';

/**
 * How a statement travels with its neighbours on our drivers (src/db/drivers/fold.ts), declared by
 * the statement itself (src/db/sql/tables.ts, `defineStatement`):
 * - `begin`: it opens our transactions (the claim, the takes), and BEGIN rides on it. Sent
 *   outside a transaction (deferred mode's claim) it is a READ COMMITTED transaction of its
 *   own, SET TRANSACTION riding on it, committed by PostgreSQL before it answers.
 * - `commit`: held back and sent with COMMIT (or with the next statement that declares a
 *   contract, when one comes first: a batch's next SAVEPOINT). Its rows are never read.
 * - `none`: a round trip of its own.
 */
export type Rides = 'begin' | 'commit' | 'none';

/** A statement's result; with its `first`'s result beside it, when it declares one. */
export interface StatementResult<R> extends QueryResult<R> {
  readonly first?: QueryResult<unknown>;
}

export interface StatementEntry {
  readonly name: string;
  readonly rides: Rides;
  /** A parameterless statement every driver sends right after this one (a SAVEPOINT). */
  readonly after: string | undefined;
  /**
   * The text of a registered statement our drivers send right before this one, with the same
   * parameters, in the same round trip when they fold; its result is returned beside this one's
   * (`StatementResult.first`).
   * Two statements, not one: the second's snapshot is taken after the first ran (READ
   * COMMITTED), which one statement cannot do (the try-claim's read after the id's try-lock,
   * src/db/sql/try-claim.ts).
   */
  readonly first: string | undefined;
  /**
   * The name it is PREPAREd under for folding (`execute <prepared>(…)`, src/db/drivers/prepared-folds.ts):
   * short (identifiers stop at 63 bytes, and schema-qualified names would be cut, then
   * collide) and distinct from `name`, which pg's own Parse messages use. Undefined for what
   * PREPARE does not take (ROLLBACK TO SAVEPOINT): it folds as text.
   */
  readonly prepared: string | undefined;
  /**
   * The name it is parsed under on the extended protocol when folds are pipelined
   * (src/db/drivers/extended-protocol.ts): distinct from `prepared` and from `name`, so that a session
   * never meets one of ours under another's name.
   */
  readonly pipelined: string;
}

/**
 * Hot-path statements are sent as named prepared statements (pg's `name:`): Postgres parses
 * and plans them once per connection instead of once per delivery. Graphile Worker does the
 * same. Only statements registered here are named; the handler's own queries are not, so the
 * number of prepared statements per connection stays bounded.
 */
/** The statements PREPARE takes (the rest, such as ROLLBACK TO SAVEPOINT, are utility commands). */
const PREPARABLE = /^\s*(select|insert|update|delete|with|values)\b/i;

/**
 * `"wi_fold:<schema>.<statement>"`: readable in pg_stat_activity and in logs, and distinct
 * from pg's own name for the statement (`wi:…`, its Parse messages). Identifiers stop at 63
 * bytes (a longer one would be cut, and two cut names could collide): past that, the
 * statement's name and a hash of its text.
 */
function preparedName(name: string, text: string): string {
  const readable = shortName('wi_fold', name, text);
  return readable.startsWith('wi_fold:') ? `"${readable.replace(/"/g, '""')}"` : readable;
}

/** `<prefix>:<schema>.<statement>`, or past 63 bytes, `<prefix>_<statement>_<hash of its text>`. */
function shortName(prefix: string, name: string, text: string): string {
  const readable = `${prefix}:${name.replace(/^wi:/, '')}`;
  if (Buffer.byteLength(readable) <= 63) return readable;
  const short = (name.split('.').pop() ?? name).replace(/[^a-z0-9_]/gi, '_').slice(-24);
  return `${prefix}_${short}_${createHash('sha256').update(text).digest('hex').slice(0, 16)}`;
}

/** The protocol name of a fold's text that is not a registered statement (BEGIN, SAVEPOINT, COMMIT). */
export function pipelinedTextName(text: string): string {
  let name = textNames.get(text);
  if (name === undefined) {
    name = `wi_pipe_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    // A handful of texts (BEGIN's variants, SAVEPOINT, COMMIT); a bound keeps a misuse from growing it.
    if (textNames.size < 100) textNames.set(text, name);
  }
  return name;
}
const textNames = new Map<string, string>();

export class StatementNames {
  readonly #entries = new Map<string, StatementEntry>();
  register(
    name: string,
    text: string,
    travel: { rides: Rides; after?: string; first?: string } = { rides: 'none' },
  ): string {
    this.#entries.set(text, {
      name,
      rides: travel.rides,
      after: travel.after,
      first: travel.first,
      prepared: PREPARABLE.test(text) ? preparedName(name, text) : undefined,
      pipelined: shortName('wi_pipe', name, text),
    });
    return text;
  }
  get(text: string): StatementEntry | undefined {
    return this.#entries.get(text);
  }
  /** Every statement that folds and can be PREPAREd, with its text. */
  *preparable(): IterableIterator<[string, StatementEntry & { prepared: string }]> {
    for (const [text, entry] of this.#entries)
      if (entry.rides !== 'none' && entry.prepared)
        yield [text, entry as StatementEntry & { prepared: string }];
  }
}

export function beginStatement(settings: TransactionSettings): string {
  let text = 'begin';
  if (settings.isolationLevel) text += ` isolation level ${settings.isolationLevel}`;
  if (settings.accessMode) text += ` ${settings.accessMode}`;
  return text;
}

/**
 * Waits for `acquire` at most `timeoutMs`, then throws PoolWaitTimeoutError (the delivery is
 * shed with 503 rather than queued without bound). A connection that arrives after the caller
 * gave up is handed straight back with `giveBack`. Works with any pool shaped like pg's,
 * whose own `connectionTimeoutMillis` we cannot set on a pool the user passed in.
 */
export function boundedWait<T>(
  acquire: Promise<T>,
  timeoutMs: number,
  giveBack: (late: T) => void,
): Promise<T> {
  if (!Number.isFinite(timeoutMs)) return acquire;
  return new Promise<T>((resolve, reject) => {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      reject(new PoolWaitTimeoutError(timeoutMs));
    }, timeoutMs);
    acquire.then(
      (value) => {
        if (!timedOut) {
          clearTimeout(timer);
          resolve(value);
        } else giveBack(value);
      },
      (err) => {
        clearTimeout(timer);
        if (!timedOut) reject(err);
      },
    );
  });
}
