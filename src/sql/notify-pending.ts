import { createHash } from 'node:crypto';
import type { Tables } from './tables.js';

/**
 * The LISTEN/NOTIFY channel of one inbox (tables + source). Named after the schema, the table
 * prefix and the source, hashed so that it is always a valid identifier of 35 characters
 * (channel names are truncated at 63 bytes, and sources may hold any printable ASCII).
 * `notifyPending` computes the same name in SQL.
 */
export function notifyChannel(t: Tables, source: string): string {
  return `wi_${createHash('md5').update(`${t.schema}.${t.prefix}|${source}`).digest('hex')}`;
}

/**
 * The wake-up of every instance's workers, in PL/pgSQL, for a claim that has just stored a
 * runnable pending event: NOTIFY is queued by the claim's own statement and sent at COMMIT (not
 * at all if the transaction rolls back), so it costs the delivery no round trip. The payload is
 * the ordering key ('' for an unordered event; keys are never empty). Failed events (run_after
 * set) are not announced: not due yet.
 *
 * It was an AFTER INSERT trigger (`notify_pending`) in 0.1.0 (dropped by migration 0002). PostgreSQL prepares a
 * trigger's WHEN condition at every INSERT into the table, also for the processed row of every
 * event applied inline, which it never fires for: 26–27k instructions per new event
 * (BENCHMARKS.md, "Lean event writes"). The claim knows when it stores a pending event, so it says so itself.
 */
export function notifyPending(t: Tables, payload: string): string {
  // Schema and prefix are validated identifiers (options.ts), safe inside a string literal.
  return `perform pg_notify('wi_' || md5('${t.schema}.${t.prefix}|' || p_source), ${payload});`;
}
