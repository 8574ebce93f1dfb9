/**
 * The subset of `pg.Pool` that webhook-inbox needs. Anything shaped like it works
 * (pg, pg-pool, a proxy that counts queries), so the core does not depend on `pg`'s types.
 */
export interface PgPoolLike {
  connect(): Promise<PgClientLike>;
  /** pg.Pool's event for each new client, emitted as the pool first hands it out. */
  on?(event: 'connect', listener: (client: PgClientLike) => void): unknown;
  end?(): Promise<void>;
  readonly totalCount?: number;
  readonly idleCount?: number;
  readonly waitingCount?: number;
}

/** The subset of a pooled `pg.PoolClient` that webhook-inbox needs. */
export interface PgClientLike {
  query(config: { text: string; values?: readonly unknown[]; name?: string }): Promise<{
    rows: unknown[];
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
  exec(query: string): Promise<Array<{ rows: unknown[]; affectedRows?: number }>>;
  close(): Promise<void>;
  readonly closed?: boolean;
}
