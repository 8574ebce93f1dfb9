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

/** A pg.Pool that counts the statements sent to Postgres: round trips, as the inbox pays them. */
export class CountingPool implements PgPoolLike {
  readonly pool: pg.Pool;
  readonly statements: string[] = [];
  constructor(connectionString: string) {
    this.pool = new pg.Pool({ connectionString, max: 10 });
    this.pool.on('error', () => {});
  }
  readonly #wrapper = onePerClient((client) => this.#wrap(client));
  async connect(): Promise<PgClientLike> {
    return this.#wrapper(await this.pool.connect());
  }
  #wrap(client: pg.PoolClient): PgClientLike {
    const statements = this.statements;
    return {
      query(config) {
        // A connection's PREPAREs of the folding statements (src/drivers/pg.ts) go once in its
        // life, not per delivery: not counted.
        if (config.text.startsWith('prepare ')) return client.query(config as pg.QueryConfig) as any;
        // One entry per round trip; a folded one (`begin; select … claim(…)`) keeps each part's start.
        statements.push(
          config.text
            .split(';')
            .map((part) => part.trim().split(/\s+/).slice(0, 4).join(' '))
            .filter(Boolean)
            .join('; '),
        );
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
