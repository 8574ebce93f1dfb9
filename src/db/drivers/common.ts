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
  /**
   * Its one name on a session, from src/db/sql/ to the wire: a statement that folds is
   * PREPAREd under it (`execute "<name>"(…)`, src/db/drivers/prepared-folds.ts), a statement
   * alone is parsed under it by node-postgres (its `name:`). Never both: what folds is not sent
   * alone under its name, so the two never meet on one session.
   */
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
  /** It folds and PREPARE takes it (not ROLLBACK TO SAVEPOINT, a utility command: that folds as its text). */
  readonly prepared: boolean;
}

/** The statements PREPARE takes (the rest, such as ROLLBACK TO SAVEPOINT, are utility commands). */
const PREPARABLE = /^\s*(select|insert|update|delete|with|values)\b/i;

/**
 * `wi:<schema>.<prefix><statement>`: readable in pg_stat_activity, pg_prepared_statements and
 * logs. Names stop at 63 bytes (PostgreSQL keys prepared statements by NAMEDATALEN: a longer
 * one would be cut, and two cut names could collide): past that, the statement's name and a
 * hash of its text.
 */
function statementName(name: string, text: string): string {
  if (Buffer.byteLength(name) <= 63) return name;
  const short = (name.split('.').pop() ?? name).replace(/[^a-z0-9_]/gi, '_').slice(-24);
  return `wi_${short}_${createHash('sha256').update(text).digest('hex').slice(0, 16)}`;
}

export class StatementNames {
  readonly #entries = new Map<string, StatementEntry>();
  register(
    name: string,
    text: string,
    travel: { rides: Rides; after?: string; first?: string } = { rides: 'none' },
  ): string {
    this.#entries.set(text, {
      name: statementName(name, text),
      rides: travel.rides,
      after: travel.after,
      first: travel.first,
      prepared: travel.rides !== 'none' && PREPARABLE.test(text),
    });
    return text;
  }
  get(text: string): StatementEntry | undefined {
    return this.#entries.get(text);
  }
  /** Every statement that folds and can be PREPAREd, with its text. */
  *preparable(): IterableIterator<[string, StatementEntry]> {
    for (const [text, entry] of this.#entries) if (entry.prepared) yield [text, entry];
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
