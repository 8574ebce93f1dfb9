import { createHash } from 'node:crypto';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/**
 * The LISTEN/NOTIFY channel of one inbox (tables + source). Named after the schema, the table
 * prefix and the source, hashed so that it is always a valid identifier of 35 characters
 * (channel names are truncated at 63 bytes, and sources may hold any printable ASCII).
 */
export function notifyChannel(t: Tables, source: string): string {
  return `wi_${createHash('md5').update(`${t.schema}.${t.prefix}|${source}`).digest('hex')}`;
}

/**
 * The wake-up of every instance's workers: one NOTIFY in a statement of its own, autocommit,
 * after the claims that stored pending events committed (src/background/wake-ups.ts coalesces
 * them: at most one per interval per instance). The payload names what may be runnable, one
 * per line: an empty line for unordered events, else an ordering key (keys are printable
 * ASCII, never a line break).
 *
 * Not in the claim, nor in a trigger: a NOTIFY queued by a transaction takes a cluster-wide lock
 * at COMMIT, held through its WAL flush, so every acknowledgement's commit would be serialised
 * with every other notifying commit of the cluster.
 */
export function createNotifyPending(names: StatementNames, t: Tables) {
  const statement = defineStatement(names, t, 'notify_pending', 'select pg_notify($1, $2)');
  return async function notifyPending(db: Queryable, channel: string, payload: string): Promise<void> {
    await statement.run(db, [channel, payload]);
  };
}

/** The payload of a wake-up: what `createNotifyPending` sends, read back by the listener. */
export function wakeUpPayload(unordered: boolean, keys: Iterable<string>): string {
  const lines = unordered ? [''] : [];
  for (const key of keys) lines.push(key);
  return lines.join('\n');
}

/** The keys (null: unordered events) a wake-up names. */
export function readWakeUp(payload: string | undefined): Array<string | null> {
  if (!payload) return [null];
  return payload.split('\n').map((line) => (line === '' ? null : line));
}
