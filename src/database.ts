import {
  CompiledQuery,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type QueryResult,
  type TransactionSettings,
} from 'kysely';
import { EmbeddedDatabaseUnavailableError, PoolWaitTimeoutError } from './errors.js';

/**
 * The subset of `pg.Pool` that webhook-inbox needs. Anything shaped like it works
 * (pg, pg-pool, a proxy that counts queries), so the core does not depend on `pg`'s types.
 */
export interface PgPoolLike {
  connect(): Promise<PgClientLike>;
  end?(): Promise<void>;
  readonly totalCount?: number;
  readonly idleCount?: number;
  readonly waitingCount?: number;
}

/** The subset of a pooled `pg.PoolClient` that webhook-inbox needs. */
export interface PgClientLike {
  query(config: { text: string; values?: readonly unknown[]; name?: string }): Promise<{
    rows: any[];
    rowCount: number | null;
    command?: string;
  }>;
  release(err?: Error | boolean): void;
  /** pg's clients are event emitters: a checked-out client reports a dead backend as 'error'. */
  on?(event: 'error', listener: (err: Error) => void): unknown;
  off?(event: 'error', listener: (err: Error) => void): unknown;
}

/** The subset of a PGlite instance that webhook-inbox needs. */
export interface PGliteLike {
  query<T>(query: string, params?: unknown[]): Promise<{ rows: T[]; affectedRows?: number }>;
  exec(query: string): Promise<Array<{ rows: any[]; affectedRows?: number }>>;
  close(): Promise<void>;
  readonly closed?: boolean;
}

/**
 * Hot-path statements are sent as named prepared statements (pg's `name:`): Postgres parses
 * and plans them once per connection instead of once per delivery. Graphile Worker does the
 * same. Only statements registered here are named; the handler's own queries are not, so the
 * number of prepared statements per connection stays bounded.
 */
export class StatementNames {
  readonly #names = new Map<string, string>();
  register(name: string, text: string): string {
    this.#names.set(text, name);
    return text;
  }
  get(text: string): string | undefined {
    return this.#names.get(text);
  }
}

const MUTATING = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);

class PgConnection implements DatabaseConnection {
  /** Set when a query failed in a way that may have left the connection unusable. */
  broken: Error | undefined;
  /**
   * A checked-out client whose backend dies between two queries (pg_terminate_backend, a
   * server restart, idle-in-transaction timeout) emits 'error' on itself, not on the pool, and
   * an unhandled 'error' event ends the process: found by the chaos suite (bench/chaos.ts),
   * which terminated a backend while a handler awaited something else inside its transaction.
   * The next query fails anyway; this only marks the connection so that the pool drops it.
   */
  readonly onError = (err: Error) => {
    this.broken = err;
  };
  constructor(
    readonly client: PgClientLike,
    readonly names: StatementNames,
  ) {
    client.on?.('error', this.onError);
  }

  async executeQuery<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
    const name = this.names.get(compiled.sql);
    try {
      const result = await this.client.query(
        name
          ? { name, text: compiled.sql, values: compiled.parameters }
          : { text: compiled.sql, values: compiled.parameters },
      );
      return {
        rows: result.rows ?? [],
        numAffectedRows:
          result.command && MUTATING.has(result.command) ? BigInt(result.rowCount ?? 0) : undefined,
      };
    } catch (err) {
      // A Postgres error (it has a SQLSTATE `code`) leaves the connection healthy; anything
      // else (socket closed, backend terminated) means the pool must not hand it out again.
      if (!(err && typeof err === 'object' && 'code' in err && typeof err.code === 'string')) {
        this.broken = err as Error;
      }
      throw err;
    }
  }

  // biome-ignore lint/correctness/useYield: streaming is not supported on this driver.
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('webhook-inbox: streaming queries are not supported');
  }
}

async function runTransactionStatement(connection: DatabaseConnection, text: string): Promise<void> {
  await connection.executeQuery(CompiledQuery.raw(text));
}

function beginStatement(settings: TransactionSettings): string {
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

class PgPoolDriver implements Driver {
  constructor(
    readonly pool: PgPoolLike,
    readonly names: StatementNames,
    readonly ownsPool: boolean,
    readonly waitTimeoutMs: number,
  ) {}
  async init(): Promise<void> {}
  async acquireConnection(): Promise<DatabaseConnection> {
    const client = await boundedWait(this.pool.connect(), this.waitTimeoutMs, (late) => late.release());
    return new PgConnection(client, this.names);
  }
  beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    return runTransactionStatement(connection, beginStatement(settings));
  }
  commitTransaction(connection: DatabaseConnection): Promise<void> {
    return runTransactionStatement(connection, 'commit');
  }
  rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    return runTransactionStatement(connection, 'rollback');
  }
  async releaseConnection(connection: DatabaseConnection): Promise<void> {
    const c = connection as PgConnection;
    c.client.off?.('error', c.onError);
    c.client.release(c.broken ?? false);
  }
  async destroy(): Promise<void> {
    if (this.ownsPool) await this.pool.end?.();
  }
}

/**
 * PGlite is one Postgres session. Two interleaved Kysely transactions on it are really one
 * transaction, so a ROLLBACK of one undoes the other's work (measured: 16 of 32 rows
 * survived). This driver hands its single connection out exclusively: transactions and
 * statements queue behind each other, which is what one session can honestly offer.
 */
/**
 * The turns of one PGlite session. Kept per PGlite instance, not per driver: two inboxes (or an
 * inbox and the app's own Kysely built with `inbox.kysely()`) sharing one PGlite share its one
 * session, so they must queue in one line.
 */
class SessionTurns {
  tail: Promise<void> = Promise.resolve();
  release: (() => void) | undefined;
}
const sessionTurns = new WeakMap<object, SessionTurns>();
function turnsOf(pglite: PGliteLike): SessionTurns {
  let turns = sessionTurns.get(pglite);
  if (!turns) {
    turns = new SessionTurns();
    sessionTurns.set(pglite, turns);
  }
  return turns;
}

class PGliteDriver implements Driver {
  readonly #connection: DatabaseConnection;
  readonly #turns: SessionTurns;

  constructor(
    readonly pglite: PGliteLike,
    readonly ownsDatabase: boolean,
    readonly waitTimeoutMs: number,
  ) {
    this.#turns = turnsOf(pglite);
    this.#connection = {
      executeQuery: async <R>(compiled: CompiledQuery): Promise<QueryResult<R>> => {
        // Without parameters, the simple protocol: several statements may run at once
        // (migrations), and BEGIN/COMMIT skip a parse.
        const result =
          compiled.parameters.length === 0
            ? ((await pglite.exec(compiled.sql)).at(-1) ?? { rows: [] })
            : await pglite.query<R>(compiled.sql, compiled.parameters as unknown[]);
        return {
          rows: result.rows,
          numAffectedRows: result.affectedRows === undefined ? undefined : BigInt(result.affectedRows),
        };
      },
      // biome-ignore lint/correctness/useYield: streaming is not supported on this driver.
      async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
        throw new Error('webhook-inbox: streaming queries are not supported');
      },
    };
  }
  async init(): Promise<void> {}
  async acquireConnection(): Promise<DatabaseConnection> {
    const turns = this.#turns;
    const previous = turns.tail;
    let release!: () => void;
    turns.tail = new Promise<void>((resolve) => {
      release = resolve;
    });
    // The one session is busy: wait (bounded) for our turn. Given up, the turn is passed on
    // untouched when it comes.
    await boundedWait(previous, this.waitTimeoutMs, () => release());
    turns.release = release;
    return this.#connection;
  }
  beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    return runTransactionStatement(connection, beginStatement(settings));
  }
  commitTransaction(connection: DatabaseConnection): Promise<void> {
    return runTransactionStatement(connection, 'commit');
  }
  rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    return runTransactionStatement(connection, 'rollback');
  }
  async releaseConnection(): Promise<void> {
    const release = this.#turns.release;
    this.#turns.release = undefined;
    release?.();
  }
  async destroy(): Promise<void> {
    await this.#turns.tail;
    if (this.ownsDatabase && !this.pglite.closed) await this.pglite.close();
  }
}

function postgresDialect(driver: Driver): Dialect {
  return {
    createAdapter: () => new PostgresAdapter(),
    createDriver: () => driver,
    createQueryCompiler: () => new PostgresQueryCompiler(),
    createIntrospector: (db) => new PostgresIntrospector(db),
  };
}

/**
 * What `db` may be: a connection string, a `pg.Pool`, a Kysely instance, or a PGlite instance
 * (or `'memory'`: an embedded PGlite database in memory).
 */
export type DatabaseInput = string | PgPoolLike | Kysely<any> | PGliteLike;

/**
 * PGlite is an optional peer dependency (about 27 MB): production installs on PostgreSQL do not
 * carry it. Only a missing package becomes the clear error; any other failure is itself.
 */
let warnedMissingPGlite = false;

async function importPGlite(): Promise<typeof import('@electric-sql/pglite')> {
  try {
    return await import('@electric-sql/pglite');
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (
      (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
      String((err as Error).message).includes('@electric-sql/pglite')
    ) {
      const missing = new EmbeddedDatabaseUnavailableError(err);
      // Deliveries answer 503 while the database cannot open; say why once, even with no logger.
      if (!warnedMissingPGlite) {
        warnedMissingPGlite = true;
        process.emitWarning(missing.message, 'WebhookInboxWarning');
      }
      throw missing;
    }
    throw err;
  }
}

export interface Database {
  readonly kysely: Kysely<any>;
  /** `pg` (a server we reach over the network) or `pglite` (embedded, one session). */
  readonly kind: 'pg' | 'pglite';
  /** The pool, when we have one (for pool-wait bounds and LISTEN/NOTIFY). */
  readonly pool: PgPoolLike | undefined;
  readonly names: StatementNames;
  destroy(): Promise<void>;
}

export function isKysely(value: unknown): value is Kysely<any> {
  return value instanceof Kysely;
}

function isPGlite(value: unknown): value is PGliteLike {
  return (
    !!value &&
    typeof value === 'object' &&
    'query' in value &&
    'exec' in value &&
    'close' in value &&
    !('connect' in value && 'totalCount' in value)
  );
}

/**
 * Builds the database seam from whatever the user gave. Connection strings and pools go
 * through our own pg driver (named statements); a Kysely instance is used as it is (its
 * driver decides); nothing at all means an embedded PGlite database.
 */
export async function openDatabase(
  input: DatabaseInput | undefined,
  options: { dataDir?: string; poolSize?: number; poolWaitTimeoutMs?: number },
): Promise<Database> {
  const wait = options.poolWaitTimeoutMs ?? Number.POSITIVE_INFINITY;
  const names = new StatementNames();
  if (input === undefined || input === 'memory') {
    const { PGlite } = await importPGlite();
    const pglite = new PGlite(options.dataDir);
    await pglite.waitReady;
    return fromPGlite(pglite as unknown as PGliteLike, true, names, wait);
  }
  if (typeof input === 'string') {
    const pg = await import('pg');
    const Pool = pg.default?.Pool ?? (pg as any).Pool;
    const pool = new Pool({ connectionString: input, max: options.poolSize ?? 10 }) as PgPoolLike & {
      on(event: 'error', listener: (err: Error) => void): void;
    };
    // An idle client's connection can drop (server restart, pg_terminate_backend); pg emits
    // that on the pool, and an unhandled 'error' event would crash the process.
    pool.on('error', () => {});
    return fromPool(pool, true, names, wait);
  }
  if (isKysely(input)) {
    return { kysely: input, kind: 'pg', pool: undefined, names, destroy: async () => {} };
  }
  if (isPGlite(input)) return fromPGlite(input, false, names, wait);
  if (typeof (input as PgPoolLike).connect === 'function')
    return fromPool(input as PgPoolLike, false, names, wait);
  throw new TypeError(
    'webhook-inbox: option `db` must be a connection string, a pg.Pool, a Kysely instance or a PGlite instance',
  );
}

function fromPool(pool: PgPoolLike, owns: boolean, names: StatementNames, wait: number): Database {
  const kysely = new Kysely<any>({ dialect: postgresDialect(new PgPoolDriver(pool, names, owns, wait)) });
  return { kysely, kind: 'pg', pool, names, destroy: () => kysely.destroy() };
}

function fromPGlite(pglite: PGliteLike, owns: boolean, names: StatementNames, wait: number): Database {
  const kysely = new Kysely<any>({ dialect: postgresDialect(new PGliteDriver(pglite, owns, wait)) });
  return { kysely, kind: 'pglite', pool: undefined, names, destroy: () => kysely.destroy() };
}
