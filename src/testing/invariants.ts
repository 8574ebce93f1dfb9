/** The inbox's state invariants, read from its tables alone: for tests, chaos runs, health scripts. */
import { CompiledQuery, type Kysely } from 'kysely';

/** Anything that runs a statement: a Kysely instance, a pg Pool or Client, a PGlite instance. */
export type InvariantsDatabase =
  | Kysely<any>
  | { query(text: string, values?: unknown[]): Promise<{ rows: any[] }> };

/** The inbox's `schema` and table `prefix` options. */
export interface InvariantsTables {
  readonly schema: string;
  /** @defaultValue '' */
  readonly prefix?: string;
}

/** One broken rule, naming the rows it found. */
export interface InvariantViolation {
  readonly rule: /** A held or pending event whose seq is below its key's cursor: nothing will ever apply it. */
    | 'waiting-below-cursor'
    /** A held or pending ordered event whose key has no cursor row. */
    | 'waiting-without-cursor'
    /** Two events waiting at one key and seq: applying one strands the other. */
    | 'two-waiting-at-one-seq'
    /** A dead letter that does not say why. */
    | 'dead-without-reason'
    /** A processed (or ignored) ordered event at or above its key's cursor: the cursor did not move with it. */
    | 'processed-at-or-above-cursor'
    /** A recorded gap reaching the cursor: the seqs it names were never skipped. */
    | 'gap-reaches-cursor';
  readonly source: string;
  readonly key: string | null;
  readonly seq: number | null;
  /** The event ids involved (none for a gap). */
  readonly ids: readonly string[];
}

/** Thrown by `assertInvariants`; `violations` lists every broken rule found. */
export class InvariantsError extends Error {
  readonly violations: readonly InvariantViolation[];
  constructor(violations: readonly InvariantViolation[]) {
    super(
      `webhook-inbox: ${violations.length} invariant violation(s): ${violations
        .slice(0, 10)
        .map((v) => `${v.rule} (source ${v.source}, key ${v.key}, seq ${v.seq}, ids ${v.ids.join(',')})`)
        .join('; ')}`,
    );
    this.name = 'InvariantsError';
    this.violations = violations;
  }
}

function quote(identifier: string): string {
  return `"${identifier.replace(/"/g, '""')}"`;
}

async function rowsOf(db: InvariantsDatabase, text: string): Promise<any[]> {
  if ('executeQuery' in db) return (await db.executeQuery(CompiledQuery.raw(text, []))).rows as any[];
  return (await db.query(text)).rows;
}

/**
 * Every violation of the inbox's invariants (an empty array when they hold).
 *
 * ```ts
 * const violations = await checkInvariants(pool, { schema: 'webhook_inbox' });
 * ```
 */
export async function checkInvariants(
  db: InvariantsDatabase,
  tables: InvariantsTables,
): Promise<InvariantViolation[]> {
  const q = (name: string) => `${quote(tables.schema)}.${quote((tables.prefix ?? '') + name)}`;
  const events = q('events');
  const keys = q('keys');
  const gaps = q('gaps');
  const found: InvariantViolation[] = [];
  // Each join names the stream too, so a Citus key's rows join on their own shard.
  const add = async (rule: InvariantViolation['rule'], text: string) => {
    for (const r of await rowsOf(db, text)) {
      found.push({
        rule,
        source: r.source,
        key: r.key ?? null,
        seq: r.seq === null || r.seq === undefined ? null : Number(r.seq),
        ids: r.ids ?? [],
      });
    }
  };
  await add(
    'waiting-below-cursor',
    `select e.source, e.key, e.seq, array[e.id] as ids from ${events} e
         join ${keys} k on k.source = e.source and k.key = e.key and k.stream = e.stream
        where e.status in ('held', 'pending') and e.key is not null and e.seq < k.next_seq
        order by e.source, e.key, e.seq`,
  );
  await add(
    'waiting-without-cursor',
    `select e.source, e.key, e.seq, array[e.id] as ids from ${events} e
        where e.status in ('held', 'pending') and e.key is not null
          and not exists (select 1 from ${keys} k where k.source = e.source and k.key = e.key and k.stream = e.stream)
        order by e.source, e.key, e.seq`,
  );
  await add(
    'two-waiting-at-one-seq',
    `select e.source, e.key, e.seq, array_agg(e.id order by e.id) as ids from ${events} e
        where e.status in ('held', 'pending') and e.key is not null
        group by e.source, e.key, e.seq having count(*) > 1
        order by e.source, e.key, e.seq`,
  );
  await add(
    'dead-without-reason',
    `select e.source, e.key, e.seq, array[e.id] as ids from ${events} e
        where e.status = 'dead' and coalesce(e.dead_reason, '') = ''
        order by e.source, e.id`,
  );
  await add(
    'processed-at-or-above-cursor',
    `select e.source, e.key, e.seq, array[e.id] as ids from ${events} e
         join ${keys} k on k.source = e.source and k.key = e.key and k.stream = e.stream
        where e.status in ('processed', 'ignored') and e.seq >= k.next_seq
        order by e.source, e.key, e.seq`,
  );
  await add(
    'gap-reaches-cursor',
    `select g.source, g.key, g.from_seq as seq from ${gaps} g
         join ${keys} k on k.source = g.source and k.key = g.key and k.stream = g.stream
        where g.to_seq >= k.next_seq
        order by g.source, g.key, g.from_seq`,
  );
  return found;
}

/**
 * `checkInvariants`, throwing an `InvariantsError` that lists any violation.
 *
 * ```ts
 * afterEach(() => assertInvariants(pool, { schema: 'webhook_inbox' }));
 * ```
 */
export async function assertInvariants(db: InvariantsDatabase, tables: InvariantsTables): Promise<void> {
  const violations = await checkInvariants(db, tables);
  if (violations.length > 0) throw new InvariantsError(violations);
}
