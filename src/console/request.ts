export interface ConsoleRequest {
  readonly method: string;
  /** The path and query below the mount point, starting with '/': `/dead-letters?reason=poison`. */
  readonly url: string;
  /** Lower-case header names. */
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** A form POST's body (application/x-www-form-urlencoded). */
  readonly body?: string;
  /** Where the console is mounted: '' at the root, '/console' below it. */
  readonly basePath?: string;
  /** The local address the request arrived on: `insecure` mode answers loopback ones only. */
  readonly localAddress?: string;
  /** The peer's address, for the login throttle (see `trustProxy`). */
  readonly remoteAddress?: string;
  /** Arrived over TLS, as the framework sees it: the session cookie is then `Secure`. */
  readonly secure?: boolean;
  /** The framework's own request object, for an `authorize` hook that needs it. */
  readonly raw?: unknown;
}

export interface ConsoleResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: string;
}

export function header(request: ConsoleRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}
