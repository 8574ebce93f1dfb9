/**
 * The SQLSTATE of a PostgreSQL error (it has a string `code`), or undefined for anything else: a
 * socket closed, a backend terminated, a bug. Our drivers drop a connection whose error has
 * none; the apply path and the operations tell a contended row from a failure by it.
 */
export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}
