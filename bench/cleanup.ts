/**
 * What a benchmark's contender servers leave behind, dropped at its end: the PostgreSQL
 * schemas named after its schema base (each contender's, and the ledger's) and the peers'
 * Redis keys (their prefix is the schema base). Used by bench/run.ts.
 */
import { execFileSync } from 'node:child_process';
import pg from 'pg';

export async function dropEverything(
  postgresUrl: string,
  redisUrl: string,
  schemaBase: string,
): Promise<void> {
  const client = new pg.Client({ connectionString: postgresUrl });
  await client.connect();
  try {
    const { rows } = await client.query(
      `select nspname from pg_namespace where nspname = $1 or nspname like $2`,
      [schemaBase, `${schemaBase}\\_%`],
    );
    for (const r of rows) await client.query(`drop schema if exists "${r.nspname}" cascade`);
  } finally {
    await client.end();
  }
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
