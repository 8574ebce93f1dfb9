import type { Tables } from '../sql/tables.js';
import { rowAtCommit } from './0008-row-at-commit.js';
import { leanEventWrites } from './0012-lean-event-writes.js';

/**
 * Migration 0013: events no handler takes (option `handlers`) are recorded `ignored`.
 *
 * - `status` may be `ignored`: final as `processed` is (a redelivery is answered from the row),
 *   but its payload and headers are kept, so that an operator can replay it once a handler
 *   exists (`webhook-inbox ignored replay --type T`). The CHECK is found by its column and
 *   written again, folded, as migration 0012 wrote it.
 * - `type`: the event's type, written with the row's final state (applied or ignored), which is
 *   what an operator lists and replays ignored events by.
 * - Two partial indexes on ignored rows: by source and type (the CLI's and the console's lists,
 *   the replay), and by `processed_at` (retention prunes them as it prunes processed rows).
 * - `claim` and `claim_latest` answer a redelivery of an ignored event as a duplicate (reason
 *   `ignored`) instead of applying it; and an ordered claim counts an ignored row as applied at
 *   its seq (a new id there is `seq-applied`), as it counts a processed one.
 *
 * Frozen history: never edit it; today's functions live in src/sql/claim.ts and
 * src/sql/claim-latest.ts.
 */
export function ignoredEvents(t: Tables): string {
  return `${statusCheck(t)}alter table ${t.events} add column type text;
create index ${t.local('events_ignored')} on ${t.events} (source, type, received_at) where status = 'ignored';
create index ${t.local('events_ignored_at')} on ${t.events} (processed_at) where status = 'ignored';
${claim(t)}
${claimLatest(t)}`;
}

/**
 * The CHECK of `status` as 0012 wrote it (found by its column, dropped, added again folded),
 * taken from 0012's text, with `ignored` among its values.
 */
function statusCheck(t: Tables): string {
  const text = leanEventWrites(t);
  const added = `alter table ${t.events} add check (status = any ('{pending,held,processed,dead}'::text[]));\n`;
  const at = text.indexOf(added);
  const block = text.slice(text.lastIndexOf('\ndo $do$', at), at + added.length);
  return replaceOnce(block, '{pending,held,processed,dead}', '{pending,held,processed,dead,ignored}');
}

/** The last function a migration's text creates: its frozen copy, as that migration left it. */
function lastFunction(text: string): string {
  return text.slice(text.lastIndexOf('\ncreate or replace function'));
}

/** `text` with its one occurrence of `from` replaced; throws if there is not exactly one. */
function replaceOnce(text: string, from: string, to: string): string {
  const parts = text.split(from);
  if (parts.length !== 2) throw new Error(`migration 0013: not one ${JSON.stringify(from)}`);
  return parts.join(to);
}

const PROCESSED_IS_DUPLICATE = `    elsif v_ev.status = 'processed' then
      decision := 'duplicate';
      result := v_ev.result;
`;
const FINAL_IS_DUPLICATE = `    elsif v_ev.status in ('processed', 'ignored') then
      -- Ignored (no handler took its type) is as final as processed: a redelivery is a
      -- duplicate, told apart by its reason, never applied by this claim.
      decision := 'duplicate';
      result := v_ev.result;
      reason := nullif(v_ev.status, 'processed');
`;

// The claim as of this migration: 0012's (the last function of its text), answering an ignored
// row as a duplicate, and counting it as applied at its seq.
function claim(t: Tables): string {
  return replaceOnce(
    replaceOnce(lastFunction(leanEventWrites(t)), PROCESSED_IS_DUPLICATE, FINAL_IS_DUPLICATE),
    "and e.seq = p_seq and e.status = 'processed') then",
    "and e.seq = p_seq and e.status in ('processed', 'ignored')) then",
  );
}

// claim_latest as of this migration: 0008's (the last function of its text), answering an
// ignored row as a duplicate.
function claimLatest(t: Tables): string {
  return replaceOnce(lastFunction(rowAtCommit(t)), PROCESSED_IS_DUPLICATE, FINAL_IS_DUPLICATE);
}
