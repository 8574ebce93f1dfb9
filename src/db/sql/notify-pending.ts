import { createHash } from 'node:crypto';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/** One inbox's LISTEN/NOTIFY channel: hashed into a valid identifier (names are cut at 63 bytes). */
export function notifyChannel(t: Tables, source: string): string {
  return `wi_${createHash('md5').update(`${t.schema}.${t.prefix}|${source}`).digest('hex')}`;
}

/** Wakes every instance's workers (wake-ups.ts): one key a line, an empty line for unordered events. */
export function createNotifyPending(names: StatementNames, t: Tables) {
  const statement = defineStatement(names, t, 'notify_pending', 'select pg_notify($1, $2)');
  return async function notifyPending(db: Queryable, channel: string, payload: string): Promise<void> {
    await statement.run(db, [channel, payload]);
  };
}

export function wakeUpPayload(unordered: boolean, keys: Iterable<string>): string {
  const lines = unordered ? [''] : [];
  for (const key of keys) lines.push(key);
  return lines.join('\n');
}

export function readWakeUp(payload: string | undefined): Array<string | null> {
  if (!payload) return [null];
  return payload.split('\n').map((line) => (line === '' ? null : line));
}
