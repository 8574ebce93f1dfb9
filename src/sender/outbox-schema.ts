/** The outbox's tables, functions and migrations (separate from the inbox's). */
import type { Kysely } from 'kysely';
import { quote } from '../db/drivers/literals.js';
import { runMigrations } from '../db/migration-runner.js';

/** Qualified names; the schema was validated as a plain identifier when options were resolved. */
export interface OutboxTables {
  readonly schema: string;
  readonly events: string;
  readonly keys: string;
  fn(name: string): string;
}

export function outboxTables(schema: string): OutboxTables {
  const q = (name: string) => `${quote(schema)}.${quote(name)}`;
  return { schema, events: q('events'), keys: q('keys'), fn: q };
}

/** The outbox's own migrations, under the inbox's rule (docs/versioning.md). */
export const outboxMigrations: ReadonlyArray<readonly [name: string, up: (t: OutboxTables) => string]> = [
  ['0001_schema', (t) => outboxTablesSql(t) + outboxFunctionsSql(t)],
];

function outboxTablesSql(t: OutboxTables): string {
  return `
create table ${t.events} (
  id           text        primary key,
  key          text,
  seq          bigint,
  body         bytea       not null,
  content_type text        not null,
  headers      jsonb       not null default '{}',
  -- Only the head of a key is 'pending' (or 'dead'); the events behind it are 'queued'.
  status       text        not null default 'pending'
                           check (status in ('pending', 'queued', 'delivered', 'dead', 'skipped')),
  attempts     integer     not null default 0,
  -- When it is due; a leased head is not due until its lease ends.
  run_after    timestamptz not null default now(),
  locked_until timestamptz,
  lock_token   text,
  last_status  integer,
  last_error   text,
  dead_reason  text        check (dead_reason in ('rejected', 'max-attempts', 'expired')),
  created_at   timestamptz not null default now(),
  delivered_at timestamptz,
  -- The retry budget: failed attempts (not "later" answers or probes), and when the first began.
  failures     integer     not null default 0,
  first_attempt_at timestamptz,
  unique (key, seq),
  check ((key is null) = (seq is null))
);
-- claim: the due heads (and unordered events), by due time.
create index ${quote('events_due')} on ${t.events} (run_after) where status = 'pending';
-- promote: the next queued event of a key.
create index ${quote('events_queued')} on ${t.events} (key, seq) where status = 'queued';
-- enqueue: "is there a head in line for this key?"
create index ${quote('events_heads')} on ${t.events} (key) where status in ('pending', 'dead') and key is not null;
create index ${quote('events_dead')} on ${t.events} (key, seq) where status = 'dead';
-- prune: delivered and skipped events by age.
create index ${quote('events_done')} on ${t.events} (delivered_at) where status in ('delivered', 'skipped');

-- The next seq to assign, per key. Its row lock also serialises producers of one key, so seqs
-- become visible in order: a producer holding seq n blocks the one that will get n + 1.
create table ${t.keys} (
  key      text    primary key,
  next_seq bigint  not null,
  -- How many events wait behind the head, and whether a dead letter blocks it.
  queued   bigint  not null default 0,
  blocked  boolean not null default false
);
-- No index on keys (queued, blocked): every enqueue and promotion updates them, and keeping
-- those updates HOT matters more than \`outstanding\`, which reads one row per key.
`;
}

function outboxFunctionsSql(t: OutboxTables): string {
  return `
create function ${t.fn('enqueue')}(
  p_id text, p_key text, p_seq bigint, p_body bytea, p_content_type text, p_headers jsonb
) returns table (r_seq bigint, r_key text, r_created boolean, r_settled boolean, r_last_seq bigint)
language plpgsql as $fn$
declare
  v_next bigint;
  v_key text;
  v_seq bigint;
  v_status text;
begin
  if p_key is null then
    -- Unordered: the primary key decides. A concurrent enqueue of the same id waits on the
    -- conflict, then finds the committed row (each statement here sees a fresh snapshot).
    insert into ${t.events} (id, body, content_type, headers)
      values (p_id, p_body, p_content_type, p_headers) on conflict (id) do nothing;
    if found then
      return query select null::bigint, null::text, true, false, null::bigint;
      return;
    end if;
    return query select e.seq, e.key, false, e.status not in ('pending', 'queued'), null::bigint
                   from ${t.events} e where e.id = p_id;
    return;
  end if;
  -- Lock the key row BEFORE looking for the id: a concurrent enqueue of the same id then
  -- waits here and sees the committed row below, instead of burning a seq.
  insert into ${t.keys} as k (key, next_seq) values (p_key, 1) on conflict do nothing;
  select k.next_seq into v_next from ${t.keys} k where k.key = p_key for update;
  select e.key, e.seq, e.status into v_key, v_seq, v_status from ${t.events} e where e.id = p_id;
  if found then
    return query select v_seq, v_key, false, v_status not in ('pending', 'queued'), null::bigint;
    return;
  end if;
  v_seq := coalesce(p_seq, v_next);
  if v_seq < v_next then
    -- A late, lower seq would be sent while a higher one is (or was) in flight. Refused with
    -- the key's last seq, not raised: an exception would abort the producer's transaction.
    return query select v_seq, p_key, false, false, v_next - 1;
    return;
  end if;
  if exists (select 1 from ${t.events} e where e.key = p_key and e.status in ('pending', 'dead')) then
    v_status := 'queued';
  else
    v_status := 'pending';
  end if;
  update ${t.keys} k set next_seq = v_seq + 1, queued = k.queued + (v_status = 'queued')::int
   where k.key = p_key;
  insert into ${t.events} (id, key, seq, body, content_type, headers, status)
    values (p_id, p_key, v_seq, p_body, p_content_type, p_headers, v_status);
  return query select v_seq, p_key, true, false, null::bigint;
end
$fn$;

-- The key's next queued event becomes its head. The caller holds the key row lock.
create function ${t.fn('promote')}(p_key text) returns void
language plpgsql as $fn$
begin
  update ${t.events} e set status = 'pending', run_after = now()
   where e.id = (select q.id from ${t.events} q where q.key = p_key and q.status = 'queued'
                  order by q.seq limit 1);
  if found then
    update ${t.keys} k set queued = k.queued - 1 where k.key = p_key;
  end if;
end
$fn$;

-- Ends a claimed head: delivered (p_status) or dead (p_reason), if the lease still holds.
create function ${t.fn('complete')}(
  p_id text, p_token text, p_status integer, p_reason text, p_error text
) returns boolean
language plpgsql as $fn$
declare
  v_key text;
begin
  select e.key into v_key from ${t.events} e
   where e.id = p_id and e.lock_token = p_token and e.status = 'pending';
  if not found then
    return false;
  end if;
  -- Key, then event: the order every function here locks in.
  if v_key is not null then
    perform 1 from ${t.keys} k where k.key = v_key for update;
  end if;
  if p_reason is null then
    update ${t.events} set status = 'delivered', delivered_at = now(), locked_until = null,
                           last_status = p_status, body = '\\x'::bytea
     where id = p_id and lock_token = p_token and status = 'pending';
  else
    update ${t.events} set status = 'dead', dead_reason = p_reason, last_status = p_status,
                           last_error = p_error, locked_until = null
     where id = p_id and lock_token = p_token and status = 'pending';
  end if;
  if not found then
    return false;
  end if;
  if v_key is not null then
    if p_reason is null then
      perform ${t.fn('promote')}(v_key);
    else
      update ${t.keys} k set blocked = true where k.key = v_key;
    end if;
  end if;
  return true;
end
$fn$;

-- An operator's action on dead letters: a key's (p_key), or one event's (p_id). p_skip gives
-- up on them (the key's next event becomes its head); otherwise they go back in line with
-- their budget reset. Returns how many.
create function ${t.fn('resolve_dead')}(p_key text, p_id text, p_skip boolean) returns integer
language plpgsql as $fn$
declare
  v_key text := p_key;
  v_n integer;
begin
  if p_key is null then
    select e.key into v_key from ${t.events} e where e.id = p_id and e.status = 'dead';
    if not found then
      return 0;
    end if;
  end if;
  if v_key is not null then
    perform 1 from ${t.keys} k where k.key = v_key for update;
  end if;
  if p_skip then
    update ${t.events} e set status = 'skipped', delivered_at = now(), body = '\\x'::bytea
     where e.status = 'dead' and (case when v_key is null then e.id = p_id and e.key is null else e.key = v_key end);
  else
    update ${t.events} e set status = 'pending', attempts = 0, failures = 0, first_attempt_at = null,
                             run_after = now(), dead_reason = null
     where e.status = 'dead' and (case when v_key is null then e.id = p_id and e.key is null else e.key = v_key end);
  end if;
  get diagnostics v_n = row_count;
  if v_n > 0 and v_key is not null then
    update ${t.keys} k set blocked = false where k.key = v_key;
    if p_skip then
      perform ${t.fn('promote')}(v_key);
    end if;
  end if;
  return v_n;
end
$fn$;
`;
}

/** Runs the outbox migrations, under an advisory lock per schema; safe from many processes at once. */
export async function migrateOutbox(db: Kysely<unknown>, tables: OutboxTables): Promise<void> {
  await runMigrations(db, {
    label: 'webhook-inbox/sender',
    schema: tables.schema,
    ledger: tables.fn('migrations'),
    lockKey: `webhook-inbox/sender:${tables.schema}`,
    migrations: outboxMigrations.map(([name, up]) => [name, () => up(tables)] as const),
  });
}
