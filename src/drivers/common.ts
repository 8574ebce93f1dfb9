import type { TransactionSettings } from 'kysely';
import { PoolWaitTimeoutError } from '../errors.js';

/**
 * How a registered statement may travel with its neighbours in one round trip (pg only; see
 * src/drivers/pg.ts): `after-begin` rides on the transaction's BEGIN (the claim and the take
 * statements open every apply), `before-commit` on its COMMIT (the stored result, and the
 * statements that record a failed run). A `before-commit` statement's rows are never read.
 */
export type Fold = 'after-begin' | 'before-commit';

export interface StatementEntry {
  readonly name: string;
  readonly fold: Fold | undefined;
  /** A parameterless statement every driver sends right after this one (a SAVEPOINT). */
  readonly then: string | undefined;
}

/**
 * Hot-path statements are sent as named prepared statements (pg's `name:`): Postgres parses
 * and plans them once per connection instead of once per delivery. Graphile Worker does the
 * same. Only statements registered here are named; the handler's own queries are not, so the
 * number of prepared statements per connection stays bounded.
 */
export class StatementNames {
  readonly #entries = new Map<string, StatementEntry>();
  register(name: string, text: string, fold?: Fold, then?: string): string {
    this.#entries.set(text, { name, fold, then });
    return text;
  }
  get(text: string): StatementEntry | undefined {
    return this.#entries.get(text);
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
