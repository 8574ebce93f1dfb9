/**
 * The ledger: a deliberately non-idempotent handler (`balance = balance + amount`) that the
 * inbox must make safe. Framework-free; `app-express.ts` (and friends) serve it over HTTP.
 * Tests, the demo and the benchmarks reuse it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type Kysely, sql } from 'kysely';
import { type HandlerContext, type Inbox, type InboxEvent, RejectEvent } from '../../src/index.js';

/** What the ledger reads of a body: `amount`, or a provider's `data.object` (`id`, `amount`). */
export interface LedgerBody {
  amount?: unknown;
  data?: { object?: { id?: unknown; amount?: unknown } };
}

export interface LedgerEntry {
  id: string;
  seq: number | null;
  amount: number;
}

export interface Account {
  key: string;
  balance: number;
  entries: LedgerEntry[];
}

/** Validates POST /fail-next's body: `{"key": string, "times"?: integer}`. */
export function parseFailNext(body: unknown): { key: string; times: number } | undefined {
  const { key, times } = (body ?? {}) as { key?: unknown; times?: unknown };
  if (typeof key !== 'string' || (times !== undefined && !Number.isSafeInteger(times))) return undefined;
  return { key, times: (times as number | undefined) ?? 1 };
}

export class Ledger {
  /** Accounts whose next event should throw (POST /fail-next), to show poison handling. */
  readonly failNext = new Map<string, number>();
  /** Each run waits this long first (HANDLER_DELAY_MS): a slow handler, as behind a slow API. */
  delayMs = 0;
  /** Handler runs, including those rolled back: what a side effect outside `tx` would see. */
  runs = 0;

  constructor(readonly schema = 'ledger') {}

  async setup(db: Kysely<any>): Promise<void> {
    await db.schema.createSchema(this.schema).ifNotExists().execute();
    const s = db.schema.withSchema(this.schema);
    await s
      .createTable('accounts')
      .ifNotExists()
      .addColumn('key', 'text', (c) => c.primaryKey())
      .addColumn('balance', 'bigint', (c) => c.notNull())
      .execute();
    await s
      .createTable('entries')
      .ifNotExists()
      .addColumn('n', 'bigserial', (c) => c.primaryKey())
      .addColumn('key', 'text', (c) => c.notNull())
      .addColumn('event_id', 'text', (c) => c.notNull())
      .addColumn('seq', 'bigint')
      .addColumn('amount', 'bigint', (c) => c.notNull())
      .execute();
  }

  /**
   * On a Citus coordinator (docs/citus.md): distributes `accounts` and `entries` by key, colocated
   * with `colocateWith` (the inbox's events), so that an event's writes on its own key's account
   * are on its shard. A distributed table's primary key holds its distribution column. Once: tables
   * already distributed are left as they are.
   */
  async distribute(db: Kysely<any>, colocateWith: string): Promise<void> {
    const t = (name: string) => sql.table(`${this.schema}.${name}`);
    const { rows } = await sql`select 1 from pg_dist_partition
                                where logicalrelid = ${`${this.schema}.accounts`}::regclass`.execute(db);
    if (rows.length > 0) return;
    await sql`alter table ${t('entries')} drop constraint entries_pkey, add primary key (key, n)`.execute(db);
    for (const name of ['accounts', 'entries'])
      await sql`select create_distributed_table(${`${this.schema}.${name}`}, 'key', colocate_with => ${colocateWith})`.execute(
        db,
      );
  }

  /**
   * The handler: adds the amount to the account and appends an entry, both in `tx`. The account
   * is the event's key (or `none`); a provider's event without `amount` (`PROVIDER=stripe`)
   * credits its object (`data.object.id`) with the object's `amount`.
   */
  readonly handle = async (event: InboxEvent<LedgerBody>, { tx, signal }: HandlerContext) => {
    this.runs++;
    if (this.delayMs > 0) await sleep(this.delayMs, undefined, { signal });
    // A body without `amount` but with a provider's object: the object's amount, to its account.
    const object = event.body?.amount === undefined ? event.body?.data?.object : undefined;
    const key = event.key ?? (typeof object?.id === 'string' ? object.id : 'none');
    const amount = object ? object.amount : event.body?.amount;
    // Wrong for good: running it again will not help. Dead-lettered at once (reason
    // `rejected`), answered 422, never retried.
    if (!Number.isSafeInteger(amount)) throw new RejectEvent('body.amount must be an integer');
    const failures = this.failNext.get(key);
    if (failures) {
      if (failures > 1) this.failNext.set(key, failures - 1);
      else this.failNext.delete(key);
      throw new Error(`failing on purpose for account ${key}`);
    }
    return this.credit(tx, key, event.id, event.seq, amount as number);
  };

  /**
   * Adds `amount` to the account and appends an entry, in `tx`: the side effect both handlers
   * (this one and the ingest contract's, `ingest.ts`) commit with the claim of their event.
   */
  async credit(
    tx: HandlerContext['tx'],
    key: string,
    eventId: string,
    seq: number | null,
    amount: number,
  ): Promise<{ balance: number }> {
    const db = tx.withSchema(this.schema);
    const { balance } = await db
      .insertInto('accounts')
      .values({ key, balance: amount })
      .onConflict((oc) => oc.column('key').doUpdateSet({ balance: sql`accounts.balance + excluded.balance` }))
      .returning('balance')
      .executeTakeFirstOrThrow();
    await db.insertInto('entries').values({ key, event_id: eventId, seq, amount }).execute();
    return { balance: Number(balance) };
  }

  async account(db: Kysely<any>, key: string): Promise<Account> {
    // Both reads in one snapshot: read one after the other, an event applied in between showed
    // its entry beside the balance from before it.
    const { account, entries } = await db
      .transaction()
      .setIsolationLevel('repeatable read')
      .setAccessMode('read only')
      .execute(async (tx) => {
        const d = tx.withSchema(this.schema);
        return {
          account: await d.selectFrom('accounts').select('balance').where('key', '=', key).executeTakeFirst(),
          entries: await d
            .selectFrom('entries')
            .select(['event_id', 'seq', 'amount'])
            .where('key', '=', key)
            .orderBy('n')
            .execute(),
        };
      });
    return {
      key,
      balance: Number(account?.balance ?? 0),
      entries: entries.map((e) => ({
        id: e.event_id,
        seq: e.seq === null ? null : Number(e.seq),
        amount: Number(e.amount),
      })),
    };
  }
}

/** The prom-client registry given as the inbox's `metrics` option, for GET /metrics. */
export function metricsRegistry(
  inbox: Inbox,
): { metrics(): Promise<string>; contentType: string } | undefined {
  const registry = inbox.options.metrics?.registry as
    | { metrics?(): Promise<string>; contentType?: string }
    | undefined;
  if (typeof registry?.metrics !== 'function') return undefined;
  return { metrics: () => registry.metrics!(), contentType: registry.contentType ?? 'text/plain' };
}
