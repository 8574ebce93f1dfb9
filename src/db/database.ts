import {
  type Dialect,
  type Driver,
  Kysely,
  type KyselyPlugin,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
} from 'kysely';
import { EmbeddedDatabaseUnavailableError } from '../errors.js';
import { StatementNames } from './drivers/common.js';
import { PgPoolDriver } from './drivers/pg.js';
import { PGliteDriver } from './drivers/pglite.js';
import type { PGliteLike, PgPoolLike } from './drivers/shapes.js';

function postgresDialect(driver: Driver): Dialect {
  return {
    createAdapter: () => new PostgresAdapter(),
    createDriver: () => driver,
    createQueryCompiler: () => new PostgresQueryCompiler(),
    createIntrospector: (db) => new PostgresIntrospector(db),
  };
}

/** A connection string, a `pg.Pool`, a Kysely instance or a PGlite instance. */
export type DatabaseInput = string | PgPoolLike | Kysely<any> | PGliteLike;

/** PGlite is an optional peer dependency: only a missing package becomes the clear error. */
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
  /** The inbox's own statements run without plugins: what it reads back is what its SQL names. */
  readonly kysely: Kysely<any>;
  /** What `inbox.kysely()` hands the application: the user's Kysely instance, else `kysely`. */
  readonly applicationKysely: Kysely<any>;
  /** The plugins of a Kysely instance the user passed: the handler's `tx` gets them back. */
  readonly handlerPlugins: readonly KyselyPlugin[];
  readonly kind: 'pg' | 'pglite';
  /** The pool, when we have one (for pool-wait bounds and LISTEN/NOTIFY). */
  readonly pool: PgPoolLike | undefined;
  /** What must never queue behind a handler: connections of their own (`ackPoolSize`) when possible. */
  readonly acks: Kysely<any>;
  readonly names: StatementNames;
  /**
   * The driver is ours: it sends a statement's `after` and `first` itself, and a claim sent outside a
   * transaction is READ COMMITTED whatever the server's default.
   */
  readonly ownDriver: boolean;
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

/** The database seam from whatever the user gave (nothing: an embedded PGlite database). */
export async function openDatabase(
  input: DatabaseInput | undefined,
  options: { dataDir?: string; poolSize?: number; poolWaitTimeoutMs?: number; ackPoolSize?: number },
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
    // An idle client's dropped connection is emitted on the pool: unheard, it would end the process.
    pool.on('error', () => {});
    const acks = options.ackPoolSize
      ? ackPool(Pool, { connectionString: input }, options.ackPoolSize)
      : undefined;
    return fromPool(pool, true, names, wait, acks);
  }
  if (isKysely(input)) {
    const kysely = input.withoutPlugins();
    return {
      kysely,
      applicationKysely: input,
      handlerPlugins: input.getExecutor().plugins,
      kind: 'pg',
      pool: undefined,
      acks: kysely,
      names,
      ownDriver: false,
      destroy: async () => {},
    };
  }
  if (isPGlite(input)) return fromPGlite(input, false, names, wait);
  if (typeof (input as PgPoolLike).connect === 'function') {
    // Acknowledgements' connections from the pool's own settings, as the LISTEN connection is.
    const given = input as PgPoolLike & {
      options?: object;
      constructor: new (options: object) => PgPoolLike;
    };
    const acks =
      options.ackPoolSize && given.options
        ? ackPool(given.constructor, given.options, options.ackPoolSize)
        : undefined;
    return fromPool(given, false, names, wait, acks);
  }
  throw new TypeError(
    'webhook-inbox: option `db` must be a connection string, a pg.Pool, a Kysely instance or a PGlite instance',
  );
}

/** A small pool of its own for acknowledgements (`ackPoolSize`), never held by a handler. */
function ackPool(Pool: new (options: object) => PgPoolLike, settings: object, size: number): PgPoolLike {
  const pool = new Pool({ ...settings, max: size }) as PgPoolLike & {
    on?(event: 'error', listener: (err: Error) => void): void;
  };
  pool.on?.('error', () => {});
  return pool;
}

function fromPool(
  pool: PgPoolLike,
  owns: boolean,
  names: StatementNames,
  wait: number,
  ackPool?: PgPoolLike,
): Database {
  const kysely = new Kysely<any>({ dialect: postgresDialect(new PgPoolDriver(pool, names, owns, wait)) });
  const acks = ackPool
    ? new Kysely<any>({ dialect: postgresDialect(new PgPoolDriver(ackPool, names, true, wait)) })
    : kysely;
  return ownDriver(kysely, 'pg', names, pool, acks);
}

function fromPGlite(pglite: PGliteLike, owns: boolean, names: StatementNames, wait: number): Database {
  const kysely = new Kysely<any>({ dialect: postgresDialect(new PGliteDriver(pglite, owns, wait, names)) });
  return ownDriver(kysely, 'pglite', names);
}

function ownDriver(
  kysely: Kysely<any>,
  kind: Database['kind'],
  names: StatementNames,
  pool?: PgPoolLike,
  acks = kysely,
): Database {
  return {
    kysely,
    applicationKysely: kysely,
    handlerPlugins: [],
    kind,
    pool,
    acks,
    names,
    ownDriver: true,
    destroy: async () => {
      await kysely.destroy();
      if (acks !== kysely) await acks.destroy();
    },
  };
}

/** Whether the inbox can open connections beside the pool from `db`: a connection string or a pg.Pool. */
export function opensConnections(db: unknown): boolean {
  if (typeof db === 'string') return db !== '' && db !== 'memory';
  const pool = db as { connect?: unknown; options?: unknown; totalCount?: unknown } | null | undefined;
  return (
    typeof pool === 'object' &&
    pool !== null &&
    typeof pool.connect === 'function' &&
    typeof pool.options === 'object' &&
    pool.options !== null &&
    'totalCount' in pool
  );
}
