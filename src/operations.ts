/**
 * Operator actions on an inbox's tables: the dead-letter queue as an operator's inbox, keys
 * that are blocked or hold events, retention, and a status summary. Handler-free, so the CLI
 * can run them against every source without the application's code; `Inbox` methods delegate
 * here and then drain in-process.
 *
 * Replay is a re-queue, never a bypass: the dead event becomes waiting again (unordered:
 * pending; ordered: held at its key's cursor, the key unblocked when it was blocked at that
 * seq), and the same take_next / take_pending path that drains and sweeps use applies it, in
 * the handler's transaction, in seq order. A CLI replay is applied by the application's
 * sweeper; `inbox.replay()` also drains at once.
 *
 * None of this is on the hot path: clarity over round trips. Each action on one event or key
 * is one short transaction that locks the key row before the event row, the order the claim
 * uses, so an operator action and a delivery of the same key serialise instead of deadlocking.
 */
import { type Kysely, type RawBuilder, sql } from 'kysely';
import { type Database, type DatabaseInput, openDatabase } from './database.js';
import { parseDuration } from './duration.js';
import { OperationError } from './errors.js';
import { type StoredEvent, toStoredEvent } from './sql/inspect.js';
import { createTables, type Tables, toNumber } from './sql/tables.js';

/** As options.ts checks `schema` and `tablePrefix`: they are spliced into SQL as identifiers. */
const IDENTIFIER = /^[a-z_][a-z0-9_]{0,39}$/;

/** A dead-lettered event, as an operator sees it. */
export interface DeadLetter extends StoredEvent {
  readonly source: string;
  /** Why it is dead: `poison` (the handler failed `maxAttempts` times) or `late` (its seq was skipped). */
  readonly deadReason: string | null;
  /** Its key is blocked at its seq: later events of the key are held until it is replayed or skipped. */
  readonly blocking: boolean;
  /** Age since it was received, in ms. */
  readonly ageMs: number;
}

/** Narrows a list of dead letters. Ages are milliseconds or duration strings (`'1h'`, `'7d'`). */
export interface DeadLetterFilter {
  source?: string;
  key?: string;
  reason?: string;
  /** Received longer ago than this. */
  olderThan?: number | string;
  /** Received more recently than this. */
  newerThan?: number | string;
  /** At most this many, oldest first. @defaultValue 100 */
  limit?: number;
}

/** What to replay: ids, or every dead letter matching a filter (`all: true` says it is meant). */
export type ReplaySelection = string | readonly string[] | (DeadLetterFilter & { all: true });

export interface ReplayResult {
  readonly source: string | null;
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  /**
   * `requeued`: waiting again (applied by a drain or the sweeper); `not-found`; `not-dead` (only
   * dead letters are replayed); `behind-cursor` (its key moved past its seq: applying it now
   * would break the order); `ambiguous` (the id exists in several sources: name one).
   */
  readonly outcome: 'requeued' | 'not-found' | 'not-dead' | 'behind-cursor' | 'ambiguous';
  /** The event's status after the action (and, from `inbox.replay`, after the drain). */
  status: StoredEvent['status'] | null;
}

/** A key that is blocked or holds events. */
export interface KeySummary {
  readonly source: string;
  readonly key: string;
  /** The seq the key waits for. */
  readonly nextSeq: number;
  readonly state: 'open' | 'blocked';
  readonly blockedSeq: number | null;
  readonly blockedReason: 'gap' | 'poison' | null;
  /** Events waiting for their turn (held, or pending at the cursor). */
  readonly heldCount: number;
  readonly firstHeldSeq: number | null;
  /** How long the oldest waiting event has waited, in ms; null when none waits. */
  readonly oldestHeldAgeMs: number | null;
  readonly updatedAt: Date;
}

export interface Gap {
  readonly fromSeq: number;
  readonly toSeq: number;
  /** `timeout` (gap timeout), `poison` (onPoison 'skip'), `skip` (an operator). */
  readonly reason: string;
  readonly createdAt: Date;
}

/** One key in full: its cursor, the seqs it holds, the gaps it skipped and its dead letters. */
export interface KeyDetail extends KeySummary {
  readonly heldSeqs: number[];
  readonly gaps: Gap[];
  readonly deadLetters: DeadLetter[];
}

export interface SkipResult {
  readonly source: string;
  readonly key: string;
  /** The seqs recorded as a gap (reason `skip`): a late arrival of one is dead-lettered as late. */
  readonly fromSeq: number;
  readonly toSeq: number;
  /** The key's cursor after the skip. */
  readonly nextSeq: number;
}

export interface PruneOptions {
  /** Processed longer ago than this (ms or a duration string). */
  olderThan: number | string;
  /** Count what would be pruned; delete nothing. @defaultValue false */
  dryRun?: boolean;
  source?: string;
  /** Rows deleted per statement (each batch is its own short transaction). @defaultValue 1000 */
  batchSize?: number;
  /** Stop after this many batches (the sweeper prunes one batch per turn). @defaultValue unlimited */
  maxBatches?: number;
}

export interface PruneResult {
  /** Rows deleted, or with `dryRun` rows that would be. */
  readonly pruned: number;
  readonly dryRun: boolean;
  /** Processed before this instant. */
  readonly cutoff: Date;
}

export interface InboxStatus {
  /** Sources present in the events or keys tables (narrowed by `source`). */
  readonly sources: string[];
  readonly events: { pending: number; held: number; processed: number; dead: number };
  readonly keys: { blocked: number; holding: number };
  /** Age of the oldest held event, in ms (the one a gap or a blocked key keeps waiting). */
  readonly oldestHeldAgeMs: number | null;
  /** Age of the oldest pending event, in ms (waiting for a worker or a retry). */
  readonly oldestPendingAgeMs: number | null;
  readonly deadByReason: Record<string, number>;
}

const MAX_LIST = 10_000;

function durationMs(name: string, value: number | string): number {
  const ms = parseDuration(value);
  if (ms === undefined) {
    throw new TypeError(
      `webhook-inbox: \`${name}\` must be milliseconds or a duration like '7d', '12h', '30m'; got ${JSON.stringify(value)}`,
    );
  }
  return ms;
}

function limitOf(value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1 || value > MAX_LIST) {
    throw new TypeError(`webhook-inbox: \`limit\` must be an integer from 1 to ${MAX_LIST}; got ${value}`);
  }
  return value;
}

function ageMs(value: unknown): number | null {
  return value === null || value === undefined ? null : Math.max(0, Math.round(Number(value)));
}

function toKeySummary(r: any): KeySummary {
  return {
    source: r.source,
    key: r.key,
    nextSeq: toNumber(r.next_seq)!,
    state: r.state,
    blockedSeq: toNumber(r.blocked_seq),
    blockedReason: r.blocked_reason,
    heldCount: Number(r.held_count ?? 0),
    firstHeldSeq: toNumber(r.first_held_seq),
    oldestHeldAgeMs: ageMs(r.oldest_held_age_ms),
    updatedAt: new Date(r.updated_at),
  };
}

/**
 * Operator actions over the tables in `tables`. With `source` they act on that source only;
 * without it (the CLI's default), on every source, and an id or key found in several sources
 * is refused as ambiguous rather than guessed.
 */
export class Operations {
  constructor(
    readonly db: Kysely<any>,
    readonly tables: Tables,
    readonly source?: string,
  ) {}

  #t(name: 'events' | 'keys' | 'gaps'): RawBuilder<unknown> {
    return sql.raw(this.tables[name]);
  }

  #sourceIs(column: string, source = this.source): RawBuilder<unknown> {
    return source === undefined ? sql`true` : sql`${sql.ref(column)} = ${source}`;
  }

  // ---- dead letters ----------------------------------------------------------------------

  /** Dead letters, oldest first, with whether each blocks its key. */
  async deadLetters(filter: DeadLetterFilter = {}): Promise<DeadLetter[]> {
    const source = filter.source ?? this.source;
    const conditions: RawBuilder<unknown>[] = [sql`e.status = 'dead'`, this.#sourceIs('e.source', source)];
    if (filter.key !== undefined) conditions.push(sql`e.key = ${filter.key}`);
    if (filter.reason !== undefined) conditions.push(sql`e.dead_reason = ${filter.reason}`);
    if (filter.olderThan !== undefined) {
      const ms = durationMs('olderThan', filter.olderThan);
      conditions.push(sql`e.received_at < now() - ${ms}::bigint * interval '1 millisecond'`);
    }
    if (filter.newerThan !== undefined) {
      const ms = durationMs('newerThan', filter.newerThan);
      conditions.push(sql`e.received_at >= now() - ${ms}::bigint * interval '1 millisecond'`);
    }
    const { rows } = await sql<any>`
      select e.*, (k.state = 'blocked' and k.blocked_seq = e.seq) as blocking,
             extract(epoch from (now() - e.received_at)) * 1000 as age_ms
        from ${this.#t('events')} e
        left join ${this.#t('keys')} k on k.source = e.source and k.key = e.key
       where ${sql.join(conditions, sql` and `)}
       order by e.received_at, e.source, e.id
       limit ${limitOf(filter.limit, 100)}`.execute(this.db);
    return rows.map((r) => this.#deadLetter(r));
  }

  #deadLetter(r: any): DeadLetter {
    return { ...toStoredEvent(r), source: r.source, blocking: r.blocking === true, ageMs: ageMs(r.age_ms)! };
  }

  /** One dead letter (any stored event, in fact) by id, with its payload. */
  async deadLetter(id: string, source = this.source): Promise<DeadLetter> {
    const rows = await this.#find(id, source);
    const { rows: full } = await sql<any>`
      select e.*, (k.state = 'blocked' and k.blocked_seq = e.seq) as blocking,
             extract(epoch from (now() - e.received_at)) * 1000 as age_ms
        from ${this.#t('events')} e
        left join ${this.#t('keys')} k on k.source = e.source and k.key = e.key
       where e.source = ${rows.source} and e.id = ${id}`.execute(this.db);
    return this.#deadLetter(full[0]);
  }

  /** The (source, key, seq) of an event id, or an OperationError (not found, ambiguous). */
  async #find(
    id: string,
    source: string | undefined,
  ): Promise<{ source: string; key: string | null; seq: number | null; status: string }> {
    const { rows } = await sql<any>`
      select source, key, seq, status from ${this.#t('events')} e
       where e.id = ${id} and ${this.#sourceIs('e.source', source)}
       limit 5`.execute(this.db);
    if (rows.length === 0) {
      throw new OperationError(
        'not-found',
        `no event with id ${JSON.stringify(id)}${source === undefined ? '' : ` in source ${JSON.stringify(source)}`}`,
      );
    }
    if (rows.length > 1) {
      throw new OperationError(
        'ambiguous',
        `event id ${JSON.stringify(id)} exists in several sources (${rows.map((r) => r.source).join(', ')}); name one with --source`,
      );
    }
    return { source: rows[0].source, key: rows[0].key, seq: toNumber(rows[0].seq), status: rows[0].status };
  }

  /**
   * Re-queues dead letters so the inbox applies them again with the normal path: attempts
   * reset, `last_error` kept for history. An ordered one goes back to its key's cursor (the key
   * is unblocked when it was blocked at that seq); one whose key already moved past its seq is
   * refused (`behind-cursor`), because applying it now would break the order.
   */
  async replay(selection: ReplaySelection): Promise<ReplayResult[]> {
    let targets: Array<{ id: string; source: string | undefined }>;
    if (typeof selection === 'string') targets = [{ id: selection, source: this.source }];
    else if (Array.isArray(selection)) targets = selection.map((id) => ({ id, source: this.source }));
    else {
      const filter = selection as DeadLetterFilter & { all: true };
      if (filter.all !== true)
        throw new TypeError('webhook-inbox: replay needs ids, or a filter with `all: true`');
      const dead = await this.deadLetters({ ...filter, limit: filter.limit ?? MAX_LIST });
      targets = dead.map((d) => ({ id: d.id, source: d.source }));
    }
    const results: ReplayResult[] = [];
    for (const target of targets) results.push(await this.#replayOne(target.id, target.source));
    return results;
  }

  async #replayOne(id: string, source: string | undefined): Promise<ReplayResult> {
    let found: { source: string; key: string | null; seq: number | null; status: string };
    try {
      found = await this.#find(id, source);
    } catch (err) {
      if (!(err instanceof OperationError)) throw err;
      return {
        source: source ?? null,
        id,
        key: null,
        seq: null,
        outcome: err.code === 'ambiguous' ? 'ambiguous' : 'not-found',
        status: null,
      };
    }
    const { key, seq } = found;
    const base = { source: found.source, id, key, seq };
    return this.db.transaction().execute(async (tx): Promise<ReplayResult> => {
      let next: number | null = null;
      let blockedHere = false;
      if (key !== null) {
        // The key row first, then the event row: the claim's lock order.
        const { rows } = await sql<any>`
          select next_seq, state, blocked_seq from ${this.#t('keys')}
           where source = ${found.source} and key = ${key} for update`.execute(tx);
        if (rows[0]) {
          next = toNumber(rows[0].next_seq);
          blockedHere = rows[0].state === 'blocked' && toNumber(rows[0].blocked_seq) === seq;
        } else {
          // No cursor yet (the key's only event died before one was stored): start it at this seq.
          await sql`insert into ${this.#t('keys')} (source, key, next_seq) values (${found.source}, ${key}, ${seq})
                    on conflict do nothing`.execute(tx);
          next = seq;
        }
      }
      const { rows: events } = await sql<any>`
        select status from ${this.#t('events')} where source = ${found.source} and id = ${id} for update`.execute(
        tx,
      );
      const status = events[0]?.status ?? null;
      if (status !== 'dead') return { ...base, outcome: status ? 'not-dead' : 'not-found', status };
      if (key !== null && seq! < next!) return { ...base, outcome: 'behind-cursor', status };
      const waiting = key === null ? 'pending' : 'held';
      await sql`
        update ${this.#t('events')}
           set status = ${waiting}, attempts = 0, dead_reason = null,
               run_after = ${key === null ? sql`now()` : sql`null`}
         where source = ${found.source} and id = ${id}`.execute(tx);
      if (blockedHere) {
        await sql`
          update ${this.#t('keys')}
             set state = 'open', blocked_seq = null, blocked_reason = null, updated_at = now()
           where source = ${found.source} and key = ${key}`.execute(tx);
      }
      return { ...base, outcome: 'requeued', status: waiting };
    });
  }

  /**
   * Moves a blocked key past its blocked seq: records the skipped seqs as a gap (reason
   * `skip`), opens the key and leaves the cursor on the next seq, so what follows can drain.
   * Given an event id, skips that dead letter's seq; given a key, skips what blocks it (the
   * poison seq, or for a gap block the whole missing range up to the first held event).
   */
  async skip(
    target: { id: string; source?: string } | { key: string; source?: string },
  ): Promise<SkipResult> {
    let source: string;
    let key: string;
    let seq: number | null = null;
    if ('id' in target) {
      const found = await this.#find(target.id, target.source ?? this.source);
      if (found.key === null) {
        throw new OperationError(
          'refused',
          `event ${JSON.stringify(target.id)} is unordered: it blocks nothing, so there is no seq to skip (replay it, or leave it dead)`,
        );
      }
      if (found.status !== 'dead') {
        throw new OperationError(
          'refused',
          `event ${JSON.stringify(target.id)} is ${found.status}, not dead`,
        );
      }
      source = found.source;
      key = found.key;
      seq = found.seq;
    } else {
      source = (await this.#findKey(target.key, target.source ?? this.source)).source;
      key = target.key;
    }
    return this.db.transaction().execute(async (tx): Promise<SkipResult> => {
      const { rows } = await sql<any>`
        select next_seq, state, blocked_seq, blocked_reason from ${this.#t('keys')}
         where source = ${source} and key = ${key} for update`.execute(tx);
      const k = rows[0];
      if (!k)
        throw new OperationError(
          'not-found',
          `no key ${JSON.stringify(key)} in source ${JSON.stringify(source)}`,
        );
      const next = toNumber(k.next_seq)!;
      let to: number;
      if (seq !== null) {
        // A dead letter's seq can be skipped while the key waits at it (blocked by it, or
        // unblocked by an operator since); once the cursor moved past it there is nothing to skip.
        if (seq !== next) {
          throw new OperationError(
            'refused',
            `event's seq ${seq} is not what key ${JSON.stringify(key)} waits for (next seq ${next}); nothing to skip`,
          );
        }
        to = seq;
      } else {
        if (k.state !== 'blocked') {
          throw new OperationError(
            'refused',
            `key ${JSON.stringify(key)} is not blocked (it waits for seq ${next})`,
          );
        }
        to = next;
        if (k.blocked_reason === 'gap') {
          const { rows: first } = await sql<any>`
            select min(seq) as seq from ${this.#t('events')}
             where source = ${source} and key = ${key} and status in ('held', 'pending') and seq > ${next}`.execute(
            tx,
          );
          const firstHeld = toNumber(first[0]?.seq);
          if (firstHeld !== null) to = firstHeld - 1;
        }
      }
      await sql`
        insert into ${this.#t('gaps')} (source, key, from_seq, to_seq, reason)
        values (${source}, ${key}, ${next}, ${to}, 'skip')
        on conflict (source, key, from_seq) do update set to_seq = greatest(${this.#t('gaps')}.to_seq, excluded.to_seq)`.execute(
        tx,
      );
      await sql`
        update ${this.#t('keys')}
           set next_seq = ${to + 1}, state = 'open', blocked_seq = null, blocked_reason = null, updated_at = now()
         where source = ${source} and key = ${key}`.execute(tx);
      return { source, key, fromSeq: next, toSeq: to, nextSeq: to + 1 };
    });
  }

  /**
   * Opens a blocked key without moving its cursor. What waits at the cursor then applies; if
   * nothing does (a missing seq, or a dead letter you chose not to replay), the key waits for it
   * again and the gap timeout (`onGapTimeout`) decides once more.
   */
  async unblock(key: string, source = this.source): Promise<KeySummary> {
    const found = await this.#findKey(key, source);
    const { rows } = await sql<any>`
      update ${this.#t('keys')}
         set state = 'open', blocked_seq = null, blocked_reason = null, updated_at = now()
       where source = ${found.source} and key = ${key} and state = 'blocked'
      returning key`.execute(this.db);
    if (rows.length === 0) {
      throw new OperationError('refused', `key ${JSON.stringify(key)} is not blocked`);
    }
    return (await this.key(key, found.source)) as KeySummary;
  }

  async #findKey(key: string, source: string | undefined): Promise<{ source: string }> {
    const { rows } = await sql<any>`
      select source from ${this.#t('keys')} k where k.key = ${key} and ${this.#sourceIs('k.source', source)}
       limit 5`.execute(this.db);
    if (rows.length === 0) {
      throw new OperationError(
        'not-found',
        `no key ${JSON.stringify(key)}${source === undefined ? '' : ` in source ${JSON.stringify(source)}`}`,
      );
    }
    if (rows.length > 1) {
      throw new OperationError(
        'ambiguous',
        `key ${JSON.stringify(key)} exists in several sources (${rows.map((r) => r.source).join(', ')}); name one with --source`,
      );
    }
    return { source: rows[0].source };
  }

  /** The current status of events by id, in one source (for reporting after a replay). */
  async statuses(source: string, ids: readonly string[]): Promise<Map<string, StoredEvent['status']>> {
    if (ids.length === 0) return new Map();
    const { rows } = await sql<any>`
      select id, status from ${this.#t('events')}
       where source = ${source} and id in (${sql.join(ids.map((id) => sql`${id}`))})`.execute(this.db);
    return new Map(rows.map((r) => [r.id, r.status]));
  }

  // ---- keys ------------------------------------------------------------------------------

  /** Keys that are blocked or hold events (or with `blocked: true`, only blocked ones), longest waiting first. */
  async keys(filter: { source?: string; blocked?: boolean; limit?: number } = {}): Promise<KeySummary[]> {
    const source = filter.source ?? this.source;
    // Starts from the two small sets (blocked keys: a partial index; waiting events: the
    // waiting index), never from the whole keys table, which is never pruned.
    const { rows } = await sql<any>`
      with waiting as (
        select e.source, e.key, count(*) as held_count, min(e.seq) as first_held_seq, min(e.received_at) as oldest
          from ${this.#t('events')} e
         where e.status in ('held', 'pending') and e.key is not null and ${this.#sourceIs('e.source', source)}
         group by e.source, e.key
      ), chosen as (
        select k.source, k.key from ${this.#t('keys')} k
         where k.state = 'blocked' and ${this.#sourceIs('k.source', source)}
        ${filter.blocked ? sql`` : sql`union select w.source, w.key from waiting w`}
      )
      select k.*, coalesce(w.held_count, 0) as held_count, w.first_held_seq,
             extract(epoch from (now() - w.oldest)) * 1000 as oldest_held_age_ms
        from chosen c
        join ${this.#t('keys')} k on k.source = c.source and k.key = c.key
        left join waiting w on w.source = c.source and w.key = c.key
       order by w.oldest nulls last, k.updated_at, k.source, k.key
       limit ${limitOf(filter.limit, 100)}`.execute(this.db);
    return rows.map(toKeySummary);
  }

  /** One key in full, or undefined when the key was never seen. */
  async key(key: string, source = this.source): Promise<KeyDetail | undefined> {
    let found: { source: string };
    try {
      found = await this.#findKey(key, source);
    } catch (err) {
      if (err instanceof OperationError && err.code === 'not-found') return undefined;
      throw err;
    }
    const { rows } = await sql<any>`
      select k.*, count(e.id) as held_count, min(e.seq) as first_held_seq,
             extract(epoch from (now() - min(e.received_at))) * 1000 as oldest_held_age_ms,
             coalesce(array_agg(e.seq order by e.seq) filter (where e.id is not null), '{}') as held_seqs
        from ${this.#t('keys')} k
        left join ${this.#t('events')} e
          on e.source = k.source and e.key = k.key and e.status in ('held', 'pending')
       where k.source = ${found.source} and k.key = ${key}
       group by k.source, k.key`.execute(this.db);
    const { rows: gaps } = await sql<any>`
      select from_seq, to_seq, reason, created_at from ${this.#t('gaps')}
       where source = ${found.source} and key = ${key} order by from_seq`.execute(this.db);
    const deadLetters = await this.deadLetters({ source: found.source, key, limit: MAX_LIST });
    return {
      ...toKeySummary(rows[0]),
      heldSeqs: (rows[0].held_seqs as unknown[]).map((s) => toNumber(s)!),
      gaps: gaps.map((g) => ({
        fromSeq: toNumber(g.from_seq)!,
        toSeq: toNumber(g.to_seq)!,
        reason: g.reason,
        createdAt: new Date(g.created_at),
      })),
      deadLetters,
    };
  }

  // ---- retention -------------------------------------------------------------------------

  /**
   * Deletes processed rows older than `olderThan`, in batches (each its own short statement,
   * so pruning never holds many locks). Held and dead rows, keys and gaps are never touched:
   * a key's cursor stays the dedup record of its ordered events after their rows are gone.
   */
  async prune(options: PruneOptions): Promise<PruneResult> {
    const ms = durationMs('olderThan', options.olderThan);
    const source = options.source ?? this.source;
    const batch = options.batchSize ?? 1000;
    if (!Number.isInteger(batch) || batch < 1 || batch > 100_000) {
      throw new TypeError(`webhook-inbox: \`batchSize\` must be an integer from 1 to 100000; got ${batch}`);
    }
    // One cutoff for every batch, so a long prune does not chase rows processed while it runs.
    const { rows: now } =
      await sql<any>`select now() - ${ms}::bigint * interval '1 millisecond' as cutoff`.execute(this.db);
    const cutoff = new Date(now[0].cutoff);
    const old = sql`e.status = 'processed' and e.processed_at < ${cutoff} and ${this.#sourceIs('e.source', source)}`;
    if (options.dryRun) {
      const { rows } = await sql<any>`select count(*) as n from ${this.#t('events')} e where ${old}`.execute(
        this.db,
      );
      return { pruned: Number(rows[0].n), dryRun: true, cutoff };
    }
    let pruned = 0;
    for (let batches = 0; batches < (options.maxBatches ?? Number.POSITIVE_INFINITY); batches++) {
      const result = await sql`
        delete from ${this.#t('events')} d
         where (d.source, d.id) in (select e.source, e.id from ${this.#t('events')} e where ${old} limit ${batch})`.execute(
        this.db,
      );
      const n = Number(result.numAffectedRows ?? 0n);
      pruned += n;
      if (n < batch) break;
    }
    return { pruned, dryRun: false, cutoff };
  }

  // ---- status ----------------------------------------------------------------------------

  /** Counts by status, blocked keys, the oldest waiting ages and dead letters by reason. */
  async status(source = this.source): Promise<InboxStatus> {
    const { rows: counts } = await sql<any>`
      select e.source, e.status, e.dead_reason, count(*) as n,
             extract(epoch from (now() - min(e.received_at))) * 1000 as oldest_age_ms
        from ${this.#t('events')} e where ${this.#sourceIs('e.source', source)}
       group by e.source, e.status, e.dead_reason`.execute(this.db);
    const { rows: keys } = await sql<any>`
      select k.source, count(*) as n from ${this.#t('keys')} k
       where k.state = 'blocked' and ${this.#sourceIs('k.source', source)} group by k.source`.execute(
      this.db,
    );
    const { rows: holding } = await sql<any>`
      select count(distinct (e.source, e.key)) as n from ${this.#t('events')} e
       where e.status in ('held', 'pending') and e.key is not null and ${this.#sourceIs('e.source', source)}`.execute(
      this.db,
    );
    const { rows: sources } = await sql<any>`
      select distinct source from (
        select source from ${this.#t('events')} union all select source from ${this.#t('keys')}
      ) s where ${this.#sourceIs('s.source', source)} order by source`.execute(this.db);
    const events = { pending: 0, held: 0, processed: 0, dead: 0 };
    const deadByReason: Record<string, number> = {};
    let oldestHeld: number | null = null;
    let oldestPending: number | null = null;
    for (const r of counts) {
      const n = Number(r.n);
      events[r.status as keyof typeof events] += n;
      if (r.status === 'dead')
        deadByReason[r.dead_reason ?? 'unknown'] = (deadByReason[r.dead_reason ?? 'unknown'] ?? 0) + n;
      const age = ageMs(r.oldest_age_ms);
      if (r.status === 'held') oldestHeld = Math.max(oldestHeld ?? 0, age ?? 0);
      if (r.status === 'pending') oldestPending = Math.max(oldestPending ?? 0, age ?? 0);
    }
    return {
      sources: sources.map((s) => s.source),
      events,
      keys: { blocked: keys.reduce((sum, k) => sum + Number(k.n), 0), holding: Number(holding[0].n) },
      oldestHeldAgeMs: oldestHeld,
      oldestPendingAgeMs: oldestPending,
      deadByReason,
    };
  }
}

export interface OpenOperationsOptions {
  /** A connection string, a `pg.Pool` or a Kysely instance (the CLI passes `DATABASE_URL`). */
  db: DatabaseInput;
  /** @defaultValue 'webhook_inbox' */
  schema?: string;
  /** @defaultValue '' */
  tablePrefix?: string;
  /** Act on this source only. @defaultValue every source */
  source?: string;
}

/**
 * Operator actions without an inbox (no handler): for scripts and the CLI. Replays it makes
 * are applied by the application's sweeper.
 *
 * ```ts
 * const ops = await openOperations({ db: process.env.DATABASE_URL! });
 * console.log(await ops.status());
 * await ops.close();
 * ```
 */
export async function openOperations(
  options: OpenOperationsOptions,
): Promise<Operations & { readonly database: Database; close(): Promise<void> }> {
  const schema = options.schema ?? 'webhook_inbox';
  const prefix = options.tablePrefix ?? '';
  if (!IDENTIFIER.test(schema))
    throw new TypeError(
      `webhook-inbox: schema must be a lower-case SQL identifier; got ${JSON.stringify(schema)}`,
    );
  if (prefix !== '' && !IDENTIFIER.test(prefix)) {
    throw new TypeError(
      `webhook-inbox: tablePrefix must be empty or a lower-case SQL identifier; got ${JSON.stringify(prefix)}`,
    );
  }
  const database = await openDatabase(options.db, { poolSize: 2 });
  const ops = new Operations(database.kysely, createTables(schema, prefix), options.source);
  return Object.assign(ops, { database, close: () => database.destroy() });
}
