import type { StatementNames } from '../drivers/common.js';
import { type RunRow, runRowParameters } from './failed-run.js';
import { defineStatement, type Queryable, stream, type Tables } from './tables.js';

/** RetryLater: the event waits until `retryAt`, attempts unchanged, in its key's order. */
export function createSnooze(names: StatementNames, t: Tables) {
  const statement = defineStatement(
    names,
    t,
    'snooze',
    `insert into ${t.events} as e (source, id, key, seq, body_hash, status, payload, headers, attempts, run_after, received_at, type,
                                   stream, group_key)
       values ($1, $2, $3, $4::bigint, $5, 'pending', $6, $7::jsonb, 0, $8::timestamptz, coalesce($9::timestamptz, now()), $10,
               ${stream('$3', '$2')}, $11)
     on conflict (source, id, stream) do update
       set run_after = excluded.run_after,
           payload = coalesce(e.payload, excluded.payload), headers = coalesce(e.headers, excluded.headers),
           type = coalesce(excluded.type, e.type)
       where e.status in ('pending', 'held') and (excluded.body_hash = '' or e.body_hash = excluded.body_hash)`,
    { rides: 'commit' },
  );
  return async function snooze(
    db: Queryable,
    a: RunRow & { retryAt: Date; receivedAt: Date | null; type: string | null; group?: string },
  ): Promise<void> {
    await statement.run(db, [...runRowParameters(a), a.retryAt, a.receivedAt, a.type, a.group ?? '']);
  };
}
