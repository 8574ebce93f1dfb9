/** The subset of `pg.Pool` that webhook-inbox needs: anything shaped like it works. */
export interface PgPoolLike {
  connect(): Promise<PgClientLike>;
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
