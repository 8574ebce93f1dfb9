/**
 * The Postgres outbox: the sender's events in a table, so nothing is lost when the sender
 * restarts, and a producer can enqueue an event in the same transaction as the change that
 * caused it (`sender.enqueue(tx, event)`: both commit, or neither).
 *
 * Round trips: enqueue 1 (a function: lock the key row, assign seq, insert); claim 1 (a CTE
 * under FOR UPDATE SKIP LOCKED that leases up to N heads of keys); each completion 1.
 *
 * Leases, not open transactions, protect a delivery in flight: the claim commits at once with
 * `locked_until = now() + leaseMs` and a fresh token, the HTTP request runs outside any
 * transaction (no connection held while the consumer thinks), and the completion only counts
 * if the token still matches. A sender that dies mid-delivery leaves a lease that expires;
 * another (or the restarted) sender then claims the event again. The consumer sees that
 * delivery twice, which is what its inbox is for.
 */
import { randomUUID } from 'node:crypto';
import { CompiledQuery, type Kysely, sql } from 'kysely';
import { type Database, type DatabaseInput, openDatabase, type StatementNames } from '../database.js';
import { runMigrations } from '../migrations.js';
import type {
  ClaimedEvent,
  DeadLetter,
  DeadReason,
  Enqueued,
  NewEvent,
  SenderStore,
  StoredEvent,
} from './store.js';

function quote(identifier: string): string {
  return `"${identifier.replace(/"/g, '""')}"`;
}

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

/** The outbox's own migrations (append-only, numbered; separate from the inbox's). */
export const outboxMigrations: ReadonlyArray<readonly [name: string, up: (t: OutboxTables) => string]> = [
  [
    '0001_outbox',
    (t) => `
create table ${t.events} (
  id           text        primary key,
  key          text,
  seq          bigint,
  body         bytea       not null,
  content_type text        not null,
  headers      jsonb       not null default '{}',
  status       text        not null default 'pending'
                           check (status in ('pending', 'delivered', 'dead', 'skipped')),
  attempts     integer     not null default 0,
  run_after    timestamptz not null default now(),
  locked_until timestamptz,
  lock_token   text,
  last_status  integer,
  last_error   text,
  dead_reason  text        check (dead_reason in ('rejected', 'max-attempts')),
  created_at   timestamptz not null default now(),
  delivered_at timestamptz,
  unique (key, seq),
  check ((key is null) = (seq is null))
);
-- Head-of-line: "is there an earlier undelivered (or dead) event of this key?"
create index ${quote('events_waiting')} on ${t.events} (key, seq) where status in ('pending', 'dead');
-- The dispatcher's scan: pending events by due time.
create index ${quote('events_due')} on ${t.events} (run_after, created_at) where status = 'pending';

-- The next seq to assign, per key. Its row lock also serialises producers of one key, so seqs
-- become visible in order: a producer holding seq n blocks the one that will get n + 1.
create table ${t.keys} (
  key      text   primary key,
  next_seq bigint not null
);

create function ${t.fn('enqueue')}(
  p_id text, p_key text, p_seq bigint, p_body bytea, p_content_type text, p_headers jsonb
) returns table (r_seq bigint, r_key text, r_created boolean)
language plpgsql as $fn$
declare
  v_next bigint;
  v_key text;
  v_seq bigint;
begin
  if p_key is not null then
    -- Lock the key row BEFORE looking for the id: a concurrent enqueue of the same id then
    -- waits here and sees the committed row below, instead of burning a seq.
    insert into ${t.keys} as k (key, next_seq) values (p_key, 1) on conflict do nothing;
    select k.next_seq into v_next from ${t.keys} k where k.key = p_key for update;
  end if;
  select e.key, e.seq into v_key, v_seq from ${t.events} e where e.id = p_id;
  if found then
    r_key := v_key;
    r_seq := v_seq;
    r_created := false;
    return next;
    return;
  end if;
  if p_key is not null then
    v_seq := coalesce(p_seq, v_next);
    update ${t.keys} k set next_seq = greatest(k.next_seq, v_seq + 1) where k.key = p_key;
  end if;
  insert into ${t.events} (id, key, seq, body, content_type, headers)
    values (p_id, p_key, v_seq, p_body, p_content_type, p_headers);
  r_key := p_key;
  r_seq := v_seq;
  r_created := true;
  return next;
end
$fn$;
`,
  ],
];

/**
 * Runs the outbox migrations up to the latest; safe from many processes at once (one
 * transaction under an advisory lock per schema; no introspection of other schemas).
 */
export async function migrateOutbox(db: Kysely<any>, tables: OutboxTables): Promise<void> {
  await runMigrations(db, {
    label: 'webhook-inbox/sender',
    schema: tables.schema,
    ledger: tables.fn('migrations'),
    lockKey: `webhook-inbox/sender:${tables.schema}`,
    migrations: outboxMigrations.map(([name, up]) => [name, () => up(tables)] as const),
  });
}

/** The statements, one round trip each. */
function statements(t: OutboxTables, names: StatementNames) {
  const named = (name: string, text: string) => names.register(`wo:${t.schema}.${name}`, text);
  return {
    enqueue: named(
      'enqueue',
      `select r_seq, r_key, r_created from ${t.fn('enqueue')}($1, $2, $3, $4, $5, $6::jsonb)`,
    ),
    // Heads of keys only: an event is claimable when no earlier seq of its key is still
    // pending (in line or leased) or dead. SKIP LOCKED lets several dispatchers claim at once
    // without waiting on each other; the `not exists` sees a concurrently leased head as
    // pending, so two dispatchers never hold two events of one key.
    claim: named(
      'claim',
      `with c as (
         select e.id from ${t.events} e
          where e.status = 'pending' and e.run_after <= now()
            and (e.locked_until is null or e.locked_until < now())
            and (e.key is null or not exists (
              select 1 from ${t.events} p
               where p.key = e.key and p.seq < e.seq and p.status in ('pending', 'dead')))
          order by e.run_after, e.created_at
          limit $1
          for update of e skip locked)
       update ${t.events} e
          set attempts = e.attempts + 1, locked_until = now() + $2 * interval '1 millisecond', lock_token = $3
         from c where e.id = c.id
       returning e.id, e.key, e.seq, e.body, e.content_type, e.headers, e.attempts`,
    ),
    delivered: named(
      'delivered',
      `update ${t.events} set status = 'delivered', delivered_at = now(), locked_until = null,
              last_status = $3, body = '\\x'::bytea
        where id = $1 and lock_token = $2 and status = 'pending'`,
    ),
    retryLater: named(
      'retry_later',
      `update ${t.events} set run_after = now() + $3 * interval '1 millisecond', locked_until = null,
              last_error = $4
        where id = $1 and lock_token = $2 and status = 'pending'`,
    ),
    deadLetter: named(
      'dead_letter',
      `update ${t.events} set status = 'dead', dead_reason = $3, last_error = $4, locked_until = null
        where id = $1 and lock_token = $2 and status = 'pending'`,
    ),
    retry: `update ${t.events} set status = 'pending', attempts = 0, run_after = now(), dead_reason = null
             where key = $1 and status = 'dead'`,
    skip: `update ${t.events} set status = 'skipped' where key = $1 and status = 'dead'`,
    deadLetters: `select id, key, seq, body, content_type, headers, attempts, dead_reason, last_error
                    from ${t.events} where status = 'dead' and ($1::text is null or key = $1)
                   order by key, seq, created_at`,
    outstanding: `select count(*) as n from ${t.events} e
                   where e.status = 'pending' and (e.key is null or not exists (
                     select 1 from ${t.events} p where p.key = e.key and p.seq < e.seq and p.status = 'dead'))`,
  };
}

function toBuffer(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  throw new Error('webhook-inbox/sender: unexpected bytea value');
}

function toHeaders(value: unknown): Record<string, string> {
  if (typeof value === 'string') return JSON.parse(value);
  return (value ?? {}) as Record<string, string>;
}

function nullableNumber(value: unknown): number | null {
  return value === null || value === undefined ? null : Number(value);
}

function stored(row: any): StoredEvent {
  return {
    id: row.id,
    key: row.key,
    seq: nullableNumber(row.seq),
    body: toBuffer(row.body),
    contentType: row.content_type,
    headers: toHeaders(row.headers),
  };
}

/** Enqueues through any Kysely handle: the outbox's own, or a producer's transaction. */
export async function enqueueOutbox(db: Kysely<any>, text: string, event: NewEvent): Promise<Enqueued> {
  const { rows } = await db.executeQuery<{ r_seq: unknown; r_key: string | null; r_created: boolean }>(
    CompiledQuery.raw(text, [
      event.id,
      event.key,
      event.seq,
      Buffer.from(event.body.buffer, event.body.byteOffset, event.body.byteLength),
      event.contentType,
      JSON.stringify(event.headers),
    ]),
  );
  const row = rows[0];
  return { id: event.id, key: row.r_key, seq: nullableNumber(row.r_seq), created: row.r_created };
}

export class OutboxStore implements SenderStore {
  readonly kind = 'postgres';
  readonly tables: OutboxTables;
  readonly #database: Database;
  readonly #sql: ReturnType<typeof statements>;

  private constructor(database: Database, tables: OutboxTables) {
    this.#database = database;
    this.tables = tables;
    this.#sql = statements(tables, database.names);
  }

  static async open(
    db: DatabaseInput,
    options: { schema: string; migrate: boolean; poolSize: number },
  ): Promise<OutboxStore> {
    const database = await openDatabase(db, { poolSize: options.poolSize });
    const tables = outboxTables(options.schema);
    try {
      if (options.migrate) await migrateOutbox(database.kysely, tables);
    } catch (err) {
      await database.destroy().catch(() => {});
      throw err;
    }
    return new OutboxStore(database, tables);
  }

  get kysely(): Kysely<any> {
    return this.#database.kysely;
  }

  get enqueueText(): string {
    return this.#sql.enqueue;
  }

  async #run<R>(text: string, parameters: unknown[]): Promise<R[]> {
    const result = await this.#database.kysely.executeQuery<R>(CompiledQuery.raw(text, parameters));
    return result.rows;
  }

  add(event: NewEvent): Promise<Enqueued> {
    return enqueueOutbox(this.#database.kysely, this.#sql.enqueue, event);
  }

  async claim(limit: number, leaseMs: number): Promise<ClaimedEvent[]> {
    const token = randomUUID();
    const rows = await this.#run<any>(this.#sql.claim, [limit, leaseMs, token]);
    return rows.map((row) => ({ ...stored(row), attempt: Number(row.attempts), token }));
  }

  async delivered(event: ClaimedEvent, status: number): Promise<void> {
    await this.#run(this.#sql.delivered, [event.id, event.token, status]);
  }

  async retryLater(event: ClaimedEvent, delayMs: number, error: string): Promise<void> {
    await this.#run(this.#sql.retryLater, [event.id, event.token, delayMs, error.slice(0, 2000)]);
  }

  async deadLetter(event: ClaimedEvent, reason: DeadReason, error: string): Promise<void> {
    await this.#run(this.#sql.deadLetter, [event.id, event.token, reason, error.slice(0, 2000)]);
  }

  async retry(key: string): Promise<number> {
    const r = await this.#database.kysely.executeQuery(CompiledQuery.raw(this.#sql.retry, [key]));
    return Number(r.numAffectedRows ?? 0);
  }

  async skip(key: string): Promise<number> {
    const r = await this.#database.kysely.executeQuery(CompiledQuery.raw(this.#sql.skip, [key]));
    return Number(r.numAffectedRows ?? 0);
  }

  async deadLetters(key?: string): Promise<DeadLetter[]> {
    const rows = await this.#run<any>(this.#sql.deadLetters, [key ?? null]);
    return rows.map((row) => ({
      ...stored(row),
      attempts: Number(row.attempts),
      reason: row.dead_reason,
      lastError: row.last_error,
    }));
  }

  async outstanding(): Promise<number> {
    const [row] = await this.#run<{ n: unknown }>(this.#sql.outstanding, []);
    return Number(row.n);
  }

  nextDueInMs(): undefined {
    return undefined;
  }

  async close(): Promise<void> {
    await this.#database.destroy();
  }
}
