import { sql } from 'kysely';
import { toNumber } from '../db/column-readers.js';
import { streamOf } from '../db/sql/tables.js';
import { OperationError } from '../errors.js';
import {
  ageMs,
  boundedLockWait,
  eventIn,
  findEvent,
  findKey,
  keyIn,
  type LockWaitOptions,
  limitOf,
  MAX_LIST,
  type OperationsContext,
  scoped,
  sourceIs,
  table,
} from './context.js';
import { type DeadLetter, deadLetters } from './dead-letters.js';

/** A key that is blocked or holds events. */
export interface KeySummary {
  readonly source: string;
  readonly key: string;
  readonly nextSeq: number;
  readonly state: 'open' | 'blocked';
  readonly blockedSeq: number | null;
  readonly blockedReason: 'gap' | 'poison' | null;
  /** Events waiting for their turn (held, or pending at the cursor). */
  readonly heldCount: number;
  readonly firstHeldSeq: number | null;
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
  readonly nextSeq: number;
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

export async function keys(
  ctx: OperationsContext,
  filter: { source?: string; blocked?: boolean; limit?: number } = {},
): Promise<KeySummary[]> {
  const source = scoped(ctx, filter.source);
  // From the two small sets (blocked keys, waiting events), never the whole keys table (never pruned).
  const { rows } = await sql<any>`
    with waiting as (
      select e.source, e.key, count(*) as held_count, min(e.seq) as first_held_seq, min(e.received_at) as oldest
        from ${table(ctx, 'events')} e
       where e.status in ('held', 'pending') and e.key is not null and ${sourceIs('e.source', source)}
       group by e.source, e.key
    ), chosen as (
      select k.source, k.key from ${table(ctx, 'keys')} k
       where k.state = 'blocked' and ${sourceIs('k.source', source)}
      ${filter.blocked ? sql`` : sql`union select w.source, w.key from waiting w`}
    )
    select k.*, coalesce(w.held_count, 0) as held_count, w.first_held_seq,
           extract(epoch from (now() - w.oldest)) * 1000 as oldest_held_age_ms
      from chosen c
      join ${table(ctx, 'keys')} k on k.source = c.source and k.key = c.key
      left join waiting w on w.source = c.source and w.key = c.key
     order by w.oldest nulls last, k.updated_at, k.source, k.key
     limit ${limitOf(filter.limit, 100)}`.execute(ctx.db);
  return rows.map(toKeySummary);
}

export async function key(
  ctx: OperationsContext,
  name: string,
  source = ctx.source,
): Promise<KeyDetail | undefined> {
  let found: { source: string };
  try {
    found = await findKey(ctx, name, source);
  } catch (err) {
    if (err instanceof OperationError && err.code === 'not-found') return undefined;
    throw err;
  }
  const { rows } = await sql<any>`
    select k.*, count(e.id) as held_count, min(e.seq) as first_held_seq,
           extract(epoch from (now() - min(e.received_at))) * 1000 as oldest_held_age_ms,
           coalesce(array_agg(e.seq order by e.seq) filter (where e.id is not null), '{}') as held_seqs
      from ${table(ctx, 'keys')} k
      left join ${table(ctx, 'events')} e
        on e.source = k.source and e.stream = k.stream and e.key = k.key and e.status in ('held', 'pending')
     where k.source = ${found.source} and k.stream = ${streamOf(name)} and k.key = ${name}
     group by k.source, k.key, k.stream`.execute(ctx.db);
  const { rows: gaps } = await sql<any>`
    select from_seq, to_seq, reason, created_at from ${table(ctx, 'gaps')}
     where source = ${found.source} and key = ${name} order by from_seq`.execute(ctx.db);
  const dead = await deadLetters(ctx, { source: found.source, key: name, limit: MAX_LIST });
  return {
    ...toKeySummary(rows[0]),
    heldSeqs: (rows[0].held_seqs as unknown[]).map((s) => toNumber(s)!),
    gaps: gaps.map((g) => ({
      fromSeq: toNumber(g.from_seq)!,
      toSeq: toNumber(g.to_seq)!,
      reason: g.reason,
      createdAt: new Date(g.created_at),
    })),
    deadLetters: dead,
  };
}

export async function unblock(
  ctx: OperationsContext,
  name: string,
  source = ctx.source,
  options: LockWaitOptions = {},
): Promise<KeySummary> {
  const found = await findKey(ctx, name, source);
  const locked = { subject: keyIn(name, found.source), verb: 'unblocked', held: 'its row' };
  const { rows } = await boundedLockWait(ctx, options, locked, (tx) =>
    sql<any>`
    update ${table(ctx, 'keys')}
       set state = 'open', blocked_seq = null, blocked_reason = null, updated_at = now()
     where source = ${found.source} and stream = ${streamOf(name)} and key = ${name} and state = 'blocked'
    returning key`.execute(tx),
  );
  if (rows.length === 0) {
    throw new OperationError('refused', `key ${JSON.stringify(name)} is not blocked`);
  }
  return (await key(ctx, name, found.source)) as KeySummary;
}

async function skipTarget(
  ctx: OperationsContext,
  target: { id: string; source?: string } | { key: string; source?: string },
): Promise<{ source: string; key: string; seq: number | null; id?: string }> {
  if (!('id' in target)) {
    const { source } = await findKey(ctx, target.key, target.source ?? ctx.source);
    return { source, key: target.key, seq: null };
  }
  const found = await findEvent(ctx, target.id, target.source ?? ctx.source);
  if (found.key === null) {
    throw new OperationError(
      'refused',
      `event ${JSON.stringify(target.id)} is unordered: it blocks nothing, so there is no seq to skip (replay it, or leave it dead)`,
    );
  }
  // Its status is checked again in the skip's transaction, under the key's lock.
  if (found.status !== 'dead') {
    throw new OperationError('refused', `event ${JSON.stringify(target.id)} is ${found.status}, not dead`);
  }
  return { source: found.source, key: found.key, seq: found.seq, id: target.id };
}

export async function skip(
  ctx: OperationsContext,
  target: { id: string; source?: string } | { key: string; source?: string },
  options: LockWaitOptions = {},
): Promise<SkipResult> {
  const { source, key, seq, id } = await skipTarget(ctx, target);
  const locked =
    id === undefined
      ? { subject: keyIn(key, source), verb: 'skipped', held: 'its row' }
      : { subject: eventIn(id, source), verb: 'skipped', held: `key ${JSON.stringify(key)}` };
  return boundedLockWait(ctx, options, locked, async (tx): Promise<SkipResult> => {
    const { rows } = await sql<any>`
      select next_seq, state, blocked_seq, blocked_reason from ${table(ctx, 'keys')}
       where source = ${source} and stream = ${streamOf(key)} and key = ${key} for update`.execute(tx);
    const k = rows[0];
    if (!k)
      throw new OperationError(
        'not-found',
        `no key ${JSON.stringify(key)} in source ${JSON.stringify(source)}`,
      );
    const next = toNumber(k.next_seq)!;
    if (id !== undefined) {
      // Under the key's lock: skipping the seq of an event a replay made waiting would strand it.
      const { rows: now } = await sql<any>`
        select status from ${table(ctx, 'events')} where source = ${source} and id = ${id}`.execute(tx);
      if (now[0]?.status !== 'dead') {
        throw new OperationError(
          'refused',
          `event ${JSON.stringify(id)} is ${now[0]?.status ?? 'gone'}, not dead`,
        );
      }
    }
    let to: number;
    if (seq !== null) {
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
          select min(seq) as seq from ${table(ctx, 'events')}
           where source = ${source} and key = ${key} and status in ('held', 'pending') and seq > ${next}`.execute(
          tx,
        );
        const firstHeld = toNumber(first[0]?.seq);
        if (firstHeld !== null) to = firstHeld - 1;
      }
    }
    await sql`
      insert into ${table(ctx, 'gaps')} (source, key, from_seq, to_seq, reason, stream)
      values (${source}, ${key}, ${next}, ${to}, 'skip', ${streamOf(key)})
      on conflict (source, key, from_seq, stream) do update set to_seq = greatest(${table(ctx, 'gaps')}.to_seq, excluded.to_seq)`.execute(
      tx,
    );
    await sql`
      update ${table(ctx, 'keys')}
         set next_seq = ${to + 1}, state = 'open', blocked_seq = null, blocked_reason = null, updated_at = now()
       where source = ${source} and stream = ${streamOf(key)} and key = ${key}`.execute(tx);
    return { source, key, fromSeq: next, toSeq: to, nextSeq: to + 1 };
  });
}
