import pg from 'pg';
import type { PgClientLike, PgPoolLike } from '../../src/index.js';

/**
 * One wrapper per connection, as pg.Pool hands out one client object per connection: the
 * inbox's driver keeps per-connection state (its prepared statements) by that object.
 */
export function onePerClient(
  wrap: (client: pg.PoolClient) => PgClientLike,
): (client: pg.PoolClient) => PgClientLike {
  const wrappers = new WeakMap<pg.PoolClient, PgClientLike>();
  return (client) => {
    let wrapper = wrappers.get(client);
    if (!wrapper) {
      wrapper = wrap(client);
      wrappers.set(client, wrapper);
    }
    return wrapper;
  };
}

/**
 * How a CountingPool hands out its connections. `client`: node-postgres's own client (its
 * `query` counted in place), as any pg.Pool hands out. `wrapper`: a pg-shaped wrapper around it,
 * as a pool of the user's might be, by which the driver keeps what it PREPAREd on the session
 * (src/db/drivers/prepared-folds.ts).
 */
export type FoldPath = 'client' | 'wrapper';

/** A pg.Pool that counts the statements sent to Postgres: round trips, as the inbox pays them. */
export class CountingPool implements PgPoolLike {
  readonly pool: pg.Pool;
  readonly statements: string[] = [];
  constructor(
    connectionString: string,
    readonly path: FoldPath = 'client',
  ) {
    // Idle connections stay open: a connection opened anew mid-test would count its first-use statements.
    this.pool = new pg.Pool({ connectionString, max: 10, idleTimeoutMillis: 0 });
    this.pool.on('error', () => {});
  }
  readonly #wrapper = onePerClient((client) =>
    this.path === 'wrapper' ? this.#wrap(client) : this.#count(client),
  );
  async connect(): Promise<PgClientLike> {
    return this.#wrapper(await this.pool.connect());
  }
  /** One entry per round trip; a folded one keeps each part's start (`begin; execute … claim(…)`). */
  #record(text: string): void {
    this.statements.push(
      text
        .split(';')
        .map((part) => part.trim().split(/\s+/).slice(0, 4).join(' '))
        .filter(Boolean)
        .join('; '),
    );
  }
  /** The client itself, its `query` counting each call. */
  #count(client: pg.PoolClient): PgClientLike {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    const record = (text: string) => this.#record(text);
    (client as { query: unknown }).query = (config: string | { text: string }, ...rest: unknown[]) => {
      const text = typeof config === 'string' ? config : config.text;
      // A connection's PREPAREs of the folding statements go once in its life: not counted.
      if (!text.startsWith('prepare ')) record(text);
      return query(config, ...rest);
    };
    return client as PgClientLike;
  }
  #wrap(client: pg.PoolClient): PgClientLike {
    const record = (text: string) => this.#record(text);
    return {
      query(config) {
        // A connection's PREPAREs of the folding statements (src/db/drivers/prepared-folds.ts) go
        // once in its life, not per delivery: not counted.
        if (!config.text.startsWith('prepare ')) record(config.text);
        return client.query(config as pg.QueryConfig) as any;
      },
      release: (err) => client.release(err as any),
      // pg's clients are event emitters: the driver hears a dead backend ('error'), and the
      // workers' listener (which holds one of the pool's connections) hears NOTIFY.
      on: (event: string, listener: (...args: any[]) => void) => client.on(event as any, listener),
      off: (event: string, listener: (...args: any[]) => void) => client.off(event as any, listener),
    } as PgClientLike;
  }
  reset(): string[] {
    return this.statements.splice(0);
  }
  end(): Promise<void> {
    return this.pool.end();
  }
}
