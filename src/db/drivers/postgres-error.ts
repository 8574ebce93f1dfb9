/** Node's socket errors carry a string `code` too (ECONNRESET), but not of this shape. */
const SQLSTATE = /^[0-9A-Z]{5}$/;

/** The SQLSTATE of a PostgreSQL error, or undefined for anything else (a socket closed, a bug). */
export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' && SQLSTATE.test(code) ? code : undefined;
}

/** The inbox's tables, functions or schema are not there (not migrated, or not visible to the role). */
export function missingTables(err: unknown): boolean {
  const state = sqlState(err);
  return state === '42P01' || state === '42883' || state === '3F000';
}
