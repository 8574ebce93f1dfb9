/**
 * What every adapter does before it maps a request: the inbox it serves (its own, made from
 * options, or one made by `createInbox`) at its path, and the answers that are not a delivery
 * (the health probe, 405). Each adapter maps only its framework's request in and the outcome out.
 */

import { checkPath, type Endpoint } from '../src/delivery/mount-path.js';
import { createInbox, Inbox } from '../src/inbox/inbox.js';
import type { InboxOptions } from '../src/options/options.js';
import { methodNotAllowed, type Outcome } from '../src/outcome.js';

/**
 * The inbox an adapter serves, and the path it answers at: `mount.path`, else the options'
 * `path` (checked: an `InboxOptionsError` naming it), else undefined (the adapter's default).
 */
export function mountedInbox<O extends InboxOptions & { path?: string }>(
  options: O | Inbox,
  mount: { path?: string },
): { core: Inbox; base: string | undefined } {
  const own = options instanceof Inbox ? undefined : options;
  const base = checkPath(mount.path ?? own?.path);
  if (!own) return { core: options as Inbox, base };
  const { path: _path, ...inboxOptions } = own;
  return { core: createInbox(inboxOptions), base };
}

/**
 * The answer to a request at the inbox's path that is not a delivery: the health probe's
 * (an error answered as the inbox answers errors) or 405. Undefined for a delivery.
 */
export function notADelivery(core: Inbox, endpoint: Exclude<Endpoint, 'pass'>): Promise<Outcome> | undefined {
  if (endpoint === 'health') return core.healthOutcome().catch((err) => core.outcomeForError(err));
  if (endpoint === 'method-not-allowed') return Promise.resolve(methodNotAllowed());
  return undefined;
}
