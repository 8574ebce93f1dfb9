import type { InboxStats } from '../../observability/metrics.js';
import { toNumber } from '../column-readers.js';
import type { StatementNames } from '../drivers/common.js';
import { defineStatement, type Queryable, type Tables } from './tables.js';

/** What waits in the inbox, for `health()` and the gauges, in one round trip over the partial indexes. */
export function createStats(names: StatementNames, t: Tables) {
  const statement = defineStatement<{
    held: unknown;
    oldest_held_age_ms: unknown;
    blocked_keys: unknown;
    dead_letters: unknown;
    pending: unknown;
    oldest_blocked_age_ms: unknown;
  }>(
    names,
    t,
    'stats',
    `select
  (select count(*) from ${t.events} e where e.source = $1 and e.status = 'held') as held,
  (select extract(epoch from now() - min(e.received_at)) * 1000 from ${t.events} e
     where e.source = $1 and e.status = 'held') as oldest_held_age_ms,
  (select count(*) from ${t.keys} k where k.source = $1 and k.state = 'blocked') as blocked_keys,
  (select count(*) from ${t.events} e where e.source = $1 and e.status = 'dead') as dead_letters,
  (select count(*) from ${t.events} e where e.source = $1 and e.status = 'pending') as pending,
  (select extract(epoch from now() - min(k.updated_at)) * 1000 from ${t.keys} k
     where k.source = $1 and k.state = 'blocked') as oldest_blocked_age_ms`,
  );
  return async function stats(db: Queryable, source: string): Promise<InboxStats> {
    const [row] = await statement.run(db, [source]);
    const age = toNumber(row.oldest_held_age_ms);
    // A blocked key's updated_at is when it was blocked: nothing else writes a blocked key.
    const blockedAge = toNumber(row.oldest_blocked_age_ms);
    return {
      held: toNumber(row.held) ?? 0,
      oldestHeldAgeMs: age === null ? null : Math.max(0, Math.round(age)),
      blockedKeys: toNumber(row.blocked_keys) ?? 0,
      deadLetters: toNumber(row.dead_letters) ?? 0,
      pending: toNumber(row.pending) ?? 0,
      oldestBlockedAgeMs: blockedAge === null ? null : Math.max(0, Math.round(blockedAge)),
    };
  };
}
