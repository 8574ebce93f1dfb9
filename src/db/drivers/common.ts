import { createHash } from 'node:crypto';
import type { QueryResult, TransactionSettings } from 'kysely';
import { PoolWaitTimeoutError } from '../../errors.js';

/** `begin`: BEGIN rides on it; `commit`: sent with COMMIT (its rows never read); `none`: alone. */
export type Rides = 'begin' | 'commit' | 'none';

/** A statement's result; with its `first`'s result beside it, when it declares one. */
export interface StatementResult<R> extends QueryResult<R> {
  readonly first?: QueryResult<unknown>;
}

export interface StatementEntry {
  /** Its name on a session: PREPAREd under it if it folds, else node-postgres's `name:`, never both. */
  readonly name: string;
  readonly rides: Rides;
  /** A parameterless statement every driver sends right after this one (a SAVEPOINT). */
  readonly after: string | undefined;
  /** Sent right before this one (result in `StatementResult.first`), so this one's snapshot is later. */
  readonly first: string | undefined;
  /** It folds and PREPARE takes it. */
  readonly prepared: boolean;
}

/** The statements PREPARE takes (the rest, such as ROLLBACK TO SAVEPOINT, are utility commands). */
const PREPARABLE = /^\s*(select|insert|update|delete|with|values)\b/i;

/** Past 63 bytes (NAMEDATALEN: a cut name could collide), the statement's name and a hash of its text. */
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

/** Waits for `acquire` at most `timeoutMs` (PoolWaitTimeoutError); a late one goes to `giveBack`. */
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
