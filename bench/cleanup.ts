/**
 * Dropping what a bench created: its PostgreSQL schemas and, for bench/run.ts, the peers' Redis
 * keys (their prefix is the schema base).
 */
import { execFileSync } from 'node:child_process';
import pg from 'pg';

/** Drops the schemas named that exist, and those whose name is `like`, on a connection of its own. */
export async function dropSchemas(postgresUrl: string, schemas: string[], like?: string): Promise<void> {
  const client = new pg.Client({ connectionString: postgresUrl });
  await client.connect();
  try {
    const { rows } = await client.query(
      'select nspname from pg_namespace where nspname = any($1::text[]) or nspname like $2',
      [schemas, like ?? null],
    );
    for (const r of rows) await client.query(`drop schema if exists "${r.nspname}" cascade`);
  } finally {
    await client.end();
  }
}

/** bench/run.ts's: its schemas, and the Redis keys under its schema base. */
export async function dropEverything(
  postgresUrl: string,
  redisUrl: string,
  schemaBase: string,
): Promise<void> {
  await dropSchemas(postgresUrl, [schemaBase], `${schemaBase}\\_%`);
  try {
    const keys = execFileSync('redis-cli', ['-u', redisUrl, '--scan', '--pattern', `${schemaBase}*`])
      .toString()
      .split('\n')
      .filter(Boolean);
    for (let i = 0; i < keys.length; i += 500)
      execFileSync('redis-cli', ['-u', redisUrl, 'del', ...keys.slice(i, i + 500)]);
  } catch {
    // redis-cli missing: the keys expire on their own (10 minutes).
  }
}
