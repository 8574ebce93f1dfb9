/** Which requests an adapter answers, alike in every framework. */
import { InboxOptionsError } from '../errors.js';

/** Where the inbox answers at an app's root without a `path`: `app.use(inbox(…))` must not take over the app. */
export const DEFAULT_ROOT_PATH = '/webhooks';

export type Endpoint = 'delivery' | 'health' | 'method-not-allowed' | 'pass';

/** `/webhooks/` and `/webhooks` are one path; `/` is the empty path (the mount point itself). */
export function normalizePath(path: string): string {
  return path.replace(/\/+$/, '');
}

export function checkPath(path: unknown, option = 'path'): string | undefined {
  if (path === undefined) return undefined;
  if (typeof path !== 'string' || !path.startsWith('/') || /[?#\s]/.test(path)) {
    throw new InboxOptionsError(
      option,
      `must be a path that starts with "/" (e.g. "/webhooks"); got ${JSON.stringify(path)}`,
    );
  }
  return normalizePath(path);
}

/** `here` is relative to where the middleware is mounted; `base` is the webhook path, normalized. */
export function endpointOf(method: string, here: string, base: string): Endpoint {
  const path = normalizePath(here);
  if (path === base) return method === 'POST' ? 'delivery' : 'method-not-allowed';
  if (path === `${base}/health` && (method === 'GET' || method === 'HEAD')) return 'health';
  return 'pass';
}

/** A route of the app chose this middleware: POST is a delivery, a GET at `…/health` the probe, else 405. */
export function routedEndpointOf(method: string, here: string): Endpoint {
  if (method === 'POST') return 'delivery';
  if ((method === 'GET' || method === 'HEAD') && normalizePath(here).endsWith('/health')) return 'health';
  return 'method-not-allowed';
}
