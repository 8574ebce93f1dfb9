import { randomBytes } from 'node:crypto';
import { appendFileSync, mkdirSync, readFileSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import type { DatabaseInput } from '../../src/index.js';

/** Where a suite runs: embedded PGlite always, real PostgreSQL when a server answers. */
export interface Target {
  readonly name: 'pglite' | 'postgres';
  /** A fresh database handle for one inbox (or several sharing one database). */
  open(): Promise<TargetDb>;
}

export interface TargetDb {
  /** Pass as the inbox's `db`. */
  readonly db: DatabaseInput;
  /** A unique schema for this test's inbox tables. */
  readonly schema: string;
  /** A unique schema for the test's own tables (the ledger's). */
  readonly appSchema: string;
  /** Another handle on the same database (a second "instance"); real Postgres only gets a second pool. */
  another(): DatabaseInput;
  close(): Promise<void>;
}

export function uniqueName(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

export const postgresUrl = inject('postgresUrl');
export const redisUrl = inject('redisUrl');

let template: Blob | undefined;
/**
 * A fresh PGlite, started from the cluster global-setup.ts made once for the run (a copy of
 * initdb's output, not of any test's data).
 */
export async function freshPGlite(): Promise<PGlite> {
  template ??= new Blob([readFileSync(inject('pgliteTemplate'))]);
  const db = new PGlite({ loadDataDir: template });
  await db.waitReady;
  return db;
}

/**
 * One PGlite for the inboxes of a file that need a database only to exist (option and type
 * checks, warnings at construction): an inbox starts at construction, and `db: 'memory'` would
 * run initdb (about 3 s of CPU) for each. Opened before the file's tests, closed after them.
 */
export function filePGlite(): () => PGlite {
  let db: PGlite | undefined;
  beforeAll(async () => {
    db = await freshPGlite();
  });
  afterAll(async () => {
    if (db && !db.closed) await db.close();
  });
  return () => db!;
}

function markPostgresRan(): void {
  // .ci/run checks this file: a CI run in which no real-Postgres suite ran fails.
  mkdirSync('.tmp', { recursive: true });
  appendFileSync('.tmp/postgres-suites-ran', `${process.pid}\n`);
}

export const pgliteTarget: Target = {
  name: 'pglite',
  async open() {
    const db = await freshPGlite();
    return {
      db,
      schema: uniqueName('wi'),
      appSchema: uniqueName('app'),
      another: () => db,
      close: async () => {
        if (!db.closed) await db.close();
      },
    };
  },
};

export const postgresTarget: Target | undefined = postgresUrl
  ? {
      name: 'postgres',
      async open() {
        markPostgresRan();
        const pools: pg.Pool[] = [];
        const pool = () => {
          const p = new pg.Pool({ connectionString: postgresUrl, max: 20 });
          p.on('error', () => {});
          pools.push(p);
          return p;
        };
        const schema = uniqueName('wi');
        const appSchema = uniqueName('app');
        const first = pool();
        return {
          db: first,
          schema,
          appSchema,
          another: pool,
          close: async () => {
            await first.query(`drop schema if exists "${schema}", "${appSchema}" cascade`).catch(() => {});
            await Promise.all(pools.map((p) => p.end().catch(() => {})));
          },
        };
      },
    }
  : undefined;

/** Every target available here: `describe.each(targets)`. */
export const targets: Target[] = [pgliteTarget, ...(postgresTarget ? [postgresTarget] : [])];

/**
 * A target's database for one suite: opened before its tests; after them, every inbox given to
 * `track` is closed, then the database.
 */
export function suiteDatabase(target: Target): {
  db(): TargetDb;
  track<T extends { close(): Promise<void> }>(inbox: T): T;
} {
  let db: TargetDb | undefined;
  const opened: Array<{ close(): Promise<void> }> = [];
  beforeAll(async () => {
    db = await target.open();
  });
  afterAll(async () => {
    for (const inbox of opened) await inbox.close();
    await db?.close();
  });
  return {
    db: () => db!,
    track: (inbox) => {
      opened.push(inbox);
      return inbox;
    },
  };
}
