/**
 * A SQLSTATE is five characters, digits and upper-case letters (PostgreSQL's errcodes): a
 * PostgreSQL error carries one as its `code`. Node's socket errors carry a string `code` too
 * (ECONNRESET, EPIPE, ETIMEDOUT), and those say the connection itself failed.
 */
const SQLSTATE = /^[0-9A-Z]{5}$/;

/**
 * The SQLSTATE of a PostgreSQL error, or undefined for anything else: a socket closed or reset,
 * a client gone unqueryable, a bug. Our drivers drop a connection whose error has none; the apply
 * path and the operations tell a contended row from a failure by it.
 */
export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' && SQLSTATE.test(code) ? code : undefined;
}

/**
 * The inbox's tables or functions are not there (42P01 undefined_table, 42883
 * undefined_function, 3F000 invalid_schema_name): `migrate: false` and no `webhook-inbox
 * migrate` at deploy, or a role without the privileges to see them.
 */
export function missingTables(err: unknown): boolean {
  const state = sqlState(err);
  return state === '42P01' || state === '42883' || state === '3F000';
}
