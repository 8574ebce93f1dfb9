import pg from 'pg';
import { literal } from '../../src/db/drivers/literals.js';
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
 * A pipeline's step as text, its values written as the text fold writes them:
 * `execute wi_pipe:<schema>.<statement>('value', …)`, or its text.
 */
function stepText(step: { name: string; text: string; values: readonly unknown[] }): string {
  if (step.values.length === 0) return step.text;
  return `execute ${step.name}(${step.values.map((value) => literal(value) ?? '?').join(', ')})`;
}

/**
 * How a CountingPool hands out its connections. `pipelined`: node-postgres's own client (its
 * `query` counted in place), on which the driver sends folds as pipelines
 * (src/db/drivers/extended-protocol.ts), as it does on any pg.Pool. `text`: a pg-shaped wrapper, on which it
 * folds them as simple-protocol text (src/db/drivers/fold.ts), as on any pool it cannot trust with
 * node-postgres's submittable queries.
 */
export type FoldPath = 'pipelined' | 'text';

/** A pg.Pool that counts the statements sent to Postgres: round trips, as the inbox pays them. */
export class CountingPool implements PgPoolLike {
  readonly pool: pg.Pool;
  readonly statements: string[] = [];
  constructor(
    connectionString: string,
    readonly path: FoldPath = 'pipelined',
  ) {
    // Idle connections stay open: a connection opened anew mid-test would count its first-use statements.
    this.pool = new pg.Pool({ connectionString, max: 10, idleTimeoutMillis: 0 });
    this.pool.on('error', () => {});
  }
  readonly #wrapper = onePerClient((client) =>
    this.path === 'text' ? this.#wrap(client) : this.#count(client),
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
  /** The client itself, its `query` counting each call: a pipeline as its statements' names and texts. */
  #count(client: pg.PoolClient): PgClientLike {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    const record = (text: string) => this.#record(text);
    (client as { query: unknown }).query = (config: any, ...rest: unknown[]) => {
      // A connection's PREPAREs (folds as text of a statement alone) go once in its life: not counted.
      if (typeof config === 'string') {
        if (!config.startsWith('prepare ')) record(config);
      } else if (Array.isArray(config?.steps))
        // A pipeline: written as the text fold would be, each registered statement as
        // `execute <its name>(<its values>)`, the rest (BEGIN, SAVEPOINT, COMMIT) as text.
        record(config.steps.map(stepText).join('; '));
      else if (!config.text.startsWith('prepare ')) record(config.text);
      return query(config, ...rest);
    };
    return client as PgClientLike;
  }
  #wrap(client: pg.PoolClient): PgClientLike {
    const record = (text: string) => this.#record(text);
    return {
      query(config) {
        // A connection's PREPAREs of the folding statements (src/db/drivers/pg.ts) go once in its
        // life, not per delivery: not counted.
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
