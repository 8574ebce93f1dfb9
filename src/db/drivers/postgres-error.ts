/**
 * The SQLSTATE of a PostgreSQL error (it has a string `code`), or undefined for anything else: a
 * socket closed, a backend terminated, a bug. Our drivers drop a connection whose error has
 * none; the apply path and the operations tell a contended row from a failure by it.
 */
export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
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
