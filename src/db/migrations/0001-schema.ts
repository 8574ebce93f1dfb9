import type { Tables } from '../sql/tables.js';

/**
 * Migration 0001: tables, indexes, constraints (functions: src/db/sql/). CHECKs compare with constant
 * arrays, stored folded.
 */
export function schema(t: Tables): string {
  return `
create table ${t.events} (
  source       text        not null,
  id           text        not null,
  key          text,
  seq          bigint,
  body_hash    text        not null,
  status       text        not null check (status = any ('{pending,held,processed,dead,ignored}'::text[])),
  payload      bytea,
  headers      jsonb,
  result       jsonb,
  attempts     integer     not null default 0,
  last_error   text,
  dead_reason  text,
  run_after    timestamptz,
  received_at  timestamptz not null default now(),
  processed_at timestamptz,
  -- The event's type, written with every row: what ignored events and dead letters are listed by.
  type         text,
  -- The last failed run's fingerprint (src/apply/cause.ts) and when it failed: dead letters are
  -- grouped and selected by them (webhook-inbox dead groups, --cause, --since, --until).
  cause        text,
  failed_at    timestamptz,
  -- The event's stream (src/db/sql/tables.ts, \`stream\`): its key, else its id. A Citus cluster
  -- distributes the three tables by it, so every unique constraint holds it; one id in two streams is
  -- kept out by the claim, under the id's lock (ARCHITECTURE.md, "Streams").
  stream       text        not null,
  -- The tenant it belongs to (option groups; '' for none): fair takes, limits (src/db/sql/take-grouped.ts).
  group_key    text        not null default '',
  primary key (source, id, stream)
);
-- The reorder buffer and the work queue: events waiting for their turn, by key and seq. Unique:
-- two events never wait at one key and seq (one of them would be stranded below the cursor).
create unique index ${t.local('events_waiting')} on ${t.events} (source, key, seq, stream) where status in ('held', 'pending');
-- The applied row of a key's seq: a new id there is a mismatch. Ignored rows too, so that the
-- claim of a seq below the cursor is one index read under the key's lock, never a table scan.
create index ${t.local('events_applied_seq')} on ${t.events} (source, key, seq)
  where status in ('processed', 'ignored') and key is not null;
-- Unordered pending events, in the order they become due: a new event is due when received,
-- a failed one at run_after, then by id: workers take the first due ones with SKIP LOCKED.
create index ${t.local('events_pending_due')} on ${t.events} (source, (coalesce(run_after, received_at)), id)
  where status = 'pending' and key is null;
-- The same, by group: a grouped take steps from group to group, then takes a group's first due.
create index ${t.local('events_group_due')} on ${t.events} (source, group_key, (coalesce(run_after, received_at)))
  where status = 'pending' and key is null;
-- Ignored events by type, for the operator's lists and replay.
create index ${t.local('events_ignored')} on ${t.events} (source, type, received_at) where status = 'ignored';
-- Retention prunes one source's processed and ignored rows by age; status() and the console
-- read one source's newest. Source first, so a source's prune never steps over another's rows.
create index ${t.local('events_processed_at')} on ${t.events} (source, processed_at) where status = 'processed';
create index ${t.local('events_ignored_at')} on ${t.events} (source, processed_at) where status = 'ignored';
-- Dead letters, for the operator: by arrival, and by failed time (dead groups, the --since and
-- --until windows, dead purge --older-than).
create index ${t.local('events_dead')} on ${t.events} (source, received_at) where status = 'dead';
create index ${t.local('events_dead_failed')} on ${t.events} (source, (coalesce(failed_at, received_at))) where status = 'dead';

create table ${t.keys} (
  source         text        not null,
  key            text        not null,
  next_seq       bigint      not null,
  state          text        not null default 'open' check (state = any ('{open,blocked}'::text[])),
  blocked_seq    bigint,
  blocked_reason text        check (blocked_reason = any ('{gap,poison}'::text[])),
  updated_at     timestamptz not null default now(),
  -- Latest-wins ordering: the version last applied for this key.
  last_version   bigint,
  stream         text        not null,
  primary key (source, key, stream)
);
-- Operators list blocked keys (webhook-inbox keys list); the keys table is never pruned.
create index ${t.local('keys_blocked')} on ${t.keys} (source, key) where state = 'blocked';

-- A group's shared state: a hold until a time (RetryLater naming the group), and its rate's next
-- free time (GCRA). Written at COMMIT only, so no take waits for it during a handler.
create table ${t.groups} (
  source     text        not null,
  group_key  text        not null,
  held_until timestamptz,
  rate_at    timestamptz,
  primary key (source, group_key)
);

create table ${t.gaps} (
  source     text        not null,
  key        text        not null,
  from_seq   bigint      not null,
  to_seq     bigint      not null,
  reason     text        not null check (reason = any ('{timeout,skip,poison}'::text[])),
  created_at timestamptz not null default now(),
  stream     text        not null,
  primary key (source, key, from_seq, stream),
  check (from_seq <= to_seq)
);
`;
}
