import type { Tables } from '../sql/tables.js';

/**
 * Migration 0003: what an operator needs to handle dead letters in bulk (built after 0.2.0's
 * squash, for 0.2.0 too).
 *
 * - `cause`: a short fingerprint of the last failed run's error (its type and its message with
 *   ids, numbers and quoted values taken out: src/apply/cause.ts), written with each failed run.
 *   Dead letters are grouped and selected by it (`webhook-inbox dead groups`, `--cause`).
 * - `failed_at`: when the last failed run was recorded (for a dead letter, when it died), so an
 *   operator can select "what failed between 10:00 and 10:15" (`--since`, `--until`).
 * - An index on dead rows by source and failed time: the groups, the windows and
 *   `dead purge --older-than` read dead rows through it.
 *
 * No function changes: both columns are written by a statement of their own that rides on the
 * failed run's COMMIT with `fail` (src/db/sql/record-cause.ts). Frozen history: never edit it.
 */
export function deadLetterCauses(t: Tables): string {
  return `
alter table ${t.events} add column cause text, add column failed_at timestamptz;
create index ${t.local('events_dead_failed')} on ${t.events} (source, (coalesce(failed_at, received_at))) where status = 'dead';
`;
}
