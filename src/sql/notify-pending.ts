import { createHash } from 'node:crypto';
import type { Tables } from './tables.js';

/**
 * The LISTEN/NOTIFY channel of one inbox (tables + source). Named after the schema, the table
 * prefix and the source, hashed so that it is always a valid identifier of 35 characters
 * (channel names are truncated at 63 bytes, and sources may hold any printable ASCII).
 * `notify_pending` computes the same name in SQL.
 */
export function notifyChannel(t: Tables, source: string): string {
  return `wi_${createHash('md5').update(`${t.schema}.${t.prefix}|${source}`).digest('hex')}`;
}

/**
 * `notify_pending`, the trigger function that wakes the workers of every instance when a
 * runnable pending event is stored: NOTIFY is sent at COMMIT, inside the claim's own statement,
 * so it costs the delivery no round trip. The payload is the ordering key ('' for an unordered
 * event; keys are never empty). Failed events (run_after set) are not announced: not due yet.
 */
export function notifyPendingFunction(t: Tables): string {
  // Schema and prefix are validated identifiers (options.ts), safe inside a string literal.
  const channelPrefix = `${t.schema}.${t.prefix}|`;
  return `
create or replace function ${t.fn('notify_pending')}() returns trigger
language plpgsql as $fn$
begin
  perform pg_notify('wi_' || md5('${channelPrefix}' || new.source), coalesce(new.key, ''));
  return null;
end
$fn$;
`;
}
