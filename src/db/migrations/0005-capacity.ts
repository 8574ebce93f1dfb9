import type { Tables } from '../sql/tables.js';

/**
 * Migration 0005: processed and ignored rows indexed by source, then age (issue 44).
 *
 * Retention prunes one source's rows past its cutoff, every 10 s, and in batches while behind;
 * `status()` counts one source's newest processed rows; the console charts one source's last
 * hour. Keyed by age alone, the index made a source's prune walk every older row of every
 * other source sharing the tables (one with a longer retention, or none, left millions of them
 * to step over at each batch). Keyed by source first, each reads its own rows only; readers of
 * every source (the CLI's `prune` without `--source`, the console of every source) read them
 * source by source. Still one index each, so an event's insert costs no more than before.
 *
 * The indexes are built in the migration's transaction, so writes to the events table wait
 * for the build (seconds per million rows). Frozen history: never edit it.
 */
export function capacity(t: Tables): string {
  return `
drop index ${t.fn('events_processed_at')};
create index ${t.local('events_processed_at')} on ${t.events} (source, processed_at) where status = 'processed';
drop index ${t.fn('events_ignored_at')};
create index ${t.local('events_ignored_at')} on ${t.events} (source, processed_at) where status = 'ignored';
`;
}
