/**
 * The Postgres outbox: only a key's head is `pending` (or `dead`), so `claim` reads one partial index. A
 * claim commits at once with a lease and a token; a completion counts only if its token still matches.
 */
import { randomUUID } from 'node:crypto';
import { CompiledQuery, type Kysely } from 'kysely';
import { toBytes, toNumber } from '../db/column-readers.js';
import { type Database, type DatabaseInput, openDatabase } from '../db/database.js';
import type { StatementNames } from '../db/drivers/common.js';
import { seqNotAfterError } from './event.js';
import { migrateOutbox, type OutboxTables, outboxTables } from './outbox-schema.js';
import type {
  ClaimedEvent,
  DeadLetter,
  DeadReason,
  DeadTarget,
  Enqueued,
  NewEvent,
  SenderStore,
  StoredEvent,
} from './store.js';

/** The statements, one round trip each (exported for the plan tests and the bench). */
export function outboxStatements(t: OutboxTables, names: StatementNames) {
  const named = (name: string, text: string) => names.register(`wo:${t.schema}.${name}`, text);
  const ms = `* interval '1 millisecond'`;
  return {
    enqueue: named(
      'enqueue',
      `select r_seq, r_key, r_created, r_settled, r_last_seq from ${t.fn('enqueue')}($1, $2, $3, $4, $5, $6::jsonb)`,
    ),
    // A lease is a due time; SKIP LOCKED lets several dispatchers claim at once.
    claim: named(
      'claim',
      `with c as (
         select e.id from ${t.events} e
          where e.status = 'pending' and e.run_after <= now()
          order by e.run_after
          limit $1
          for update of e skip locked)
       update ${t.events} e
          set attempts = e.attempts + 1, run_after = now() + $2 ${ms}, locked_until = now() + $2 ${ms},
              lock_token = $3, first_attempt_at = coalesce(e.first_attempt_at, now())
         from c where e.id = c.id
       returning e.id, e.key, e.seq, e.body, e.content_type, e.headers, e.attempts, e.failures,
                 (extract(epoch from e.first_attempt_at) * 1000)::float8 as first_attempt_ms`,
    ),
    complete: named('complete', `select ${t.fn('complete')}($1, $2, $3, $4, $5) as done`),
    retryLater: named(
      'retry_later',
      `update ${t.events} set run_after = now() + $3 ${ms}, locked_until = null, last_error = $4,
              failures = failures + $5
        where id = $1 and lock_token = $2 and status = 'pending'`,
    ),
    resolveDead: `select ${t.fn('resolve_dead')}($1, $2, $3) as n`,
    deadLetters: `select id, key, seq, body, content_type, headers, attempts, dead_reason, last_error
                    from ${t.events} where status = 'dead' and ($1::text is null or key = $1)
                   order by key, seq, created_at`,
    outstanding: `select (select count(*) from ${t.events} where status = 'pending')
                       + (select coalesce(sum(queued), 0) from ${t.keys} where queued > 0 and not blocked) as n`,
    prune: `with d as (
              select id from ${t.events}
               where status in ('delivered', 'skipped') and delivered_at < now() - $1 ${ms}
               limit $2)
            delete from ${t.events} e using d where e.id = d.id`,
  };
}

const PRUNE_BATCH = 1000;

function stored(row: any): StoredEvent {
  return {
    id: row.id,
    key: row.key,
    seq: toNumber(row.seq),
    body: toBytes(row.body),
    contentType: row.content_type,
    headers: typeof row.headers === 'string' ? JSON.parse(row.headers) : (row.headers ?? {}),
  };
}

/** Enqueues through the outbox's own Kysely, or a producer's transaction. */
export async function enqueueOutbox(db: Kysely<any>, text: string, event: NewEvent): Promise<Enqueued> {
  // A producer's transaction may carry plugins (a CamelCasePlugin would rename `r_seq`).
  const { rows } = await db.withoutPlugins().executeQuery<{
    r_seq: unknown;
    r_key: string | null;
    r_created: boolean;
    r_settled: boolean;
    r_last_seq: unknown;
  }>(
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
  if (row.r_last_seq !== null) throw seqNotAfterError(Number(row.r_seq), Number(row.r_last_seq));
  return {
    id: event.id,
    key: row.r_key,
    seq: toNumber(row.r_seq),
    created: row.r_created,
    settled: row.r_settled,
  };
}

export class OutboxStore implements SenderStore {
  readonly kind = 'postgres';
  readonly tables: OutboxTables;
  readonly #database: Database;
  readonly #sql: ReturnType<typeof outboxStatements>;

  private constructor(database: Database, tables: OutboxTables) {
    this.#database = database;
    this.tables = tables;
    this.#sql = outboxStatements(tables, database.names);
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

  /** The application's instance, plugins and all; the outbox's own statements run without them. */
  get kysely(): Kysely<any> {
    return this.#database.applicationKysely;
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
    return rows.map((row) => ({
      ...stored(row),
      attempt: Number(row.attempts),
      failures: Number(row.failures),
      firstAttemptAt: Number(row.first_attempt_ms),
      token,
    }));
  }

  async delivered(event: ClaimedEvent, status: number): Promise<void> {
    await this.#run(this.#sql.complete, [event.id, event.token, status, null, null]);
  }

  async retryLater(event: ClaimedEvent, delayMs: number, error: string, counted: boolean): Promise<void> {
    await this.#run(this.#sql.retryLater, [
      event.id,
      event.token,
      delayMs,
      error.slice(0, 2000),
      counted ? 1 : 0,
    ]);
  }

  async deadLetter(event: ClaimedEvent, reason: DeadReason, error: string): Promise<void> {
    const status = /^HTTP (\d{3})/.exec(error)?.[1];
    await this.#run(this.#sql.complete, [
      event.id,
      event.token,
      status === undefined ? null : Number(status),
      reason,
      error.slice(0, 2000),
    ]);
  }

  async #resolveDead(target: DeadTarget, skip: boolean): Promise<number> {
    const [key, id] = typeof target === 'string' ? [target, null] : [null, target.id];
    const [row] = await this.#run<{ n: unknown }>(this.#sql.resolveDead, [key, id, skip]);
    return Number(row.n);
  }

  retry(target: DeadTarget): Promise<number> {
    return this.#resolveDead(target, false);
  }

  skip(target: DeadTarget): Promise<number> {
    return this.#resolveDead(target, true);
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

  async prune(retentionMs: number): Promise<number> {
    let total = 0;
    for (;;) {
      const r = await this.#database.kysely.executeQuery(
        CompiledQuery.raw(this.#sql.prune, [retentionMs, PRUNE_BATCH]),
      );
      const n = Number(r.numAffectedRows ?? 0);
      total += n;
      if (n < PRUNE_BATCH) return total;
    }
  }

  async close(): Promise<void> {
    await this.#database.destroy();
  }
}
