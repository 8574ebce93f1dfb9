/**
 * What one new event costs PostgreSQL, statement by statement: the CPU of one backend per
 * transaction (from /proc, user + system), for the bare ledger write and for the inbox's
 * transaction with parts of it taken away. It answers "how much of the inbox's price is
 * Postgres work that any inbox must do", which throughput on a 2-core machine (where the
 * server, Postgres and the load share the cores) cannot separate.
 *
 *   npx tsx bench/postgres-cost.ts                 every variant, 15 rounds of 300 transactions
 *   ROUNDS=30 TXS=500 npx tsx bench/postgres-cost.ts bare inbox
 *   CLIENTS=10 TXS=3000 npx tsx bench/postgres-cost.ts bare try-claim savepoint-only
 *
 * With CLIENTS > 1, that many connections send each variant's transactions at once (the bench's
 * pool has 10), and the CPU is summed over their backends: what a statement costs when other
 * backends run beside it (the lock manager, snapshots, WAL insertion), which one client cannot
 * show, and the variant's transactions per second. /proc counts CPU in 10 ms ticks: TXS × CLIENTS
 * should keep a round well over a second.
 *
 * The texts are what the inbox sends for a new unordered event (`try-claim`: BEGIN with the
 * try-claim's two statements folded in and the SAVEPOINT after them; the handler's two
 * statements; the event's row, with its result, folded into COMMIT), with literals as
 * src/db/drivers/pg.ts writes them, and what it sent before: `inbox`, `inbox-prepared` (the claim
 * function, which takes the id's advisory lock and writes no row: `row_at_commit`) and
 * `inbox-prepared-update` (before migration 0008: the claim inserts the row, the result is an
 * UPDATE at COMMIT). `try-claim` and `ordered` send their folds as simple-protocol text
 * (`execute <prepared>(literals)`, what the driver sends).
 * With INSTRUCTIONS=<dir>, the cost is counted in instructions instead of CPU ticks: the same
 * count for the same statements however busy the machine is (this 2-core machine's CPU per
 * request varies up to 2× from one minute to the next). It needs a PostgreSQL started under
 * callgrind, writing its counts into <dir>, with counters zeroed by `pg_sleep` and dumped by
 * `pg_backend_pid`, which this script calls around each measured batch:
 *
 *   su postgres -c "valgrind --tool=callgrind --callgrind-out-file=<dir>/cg.%p \
 *     --zero-before=pg_sleep --dump-before=pg_backend_pid postgres -D <datadir> -p 5499"
 *   INSTRUCTIONS=<dir> ROUNDS=3 TXS=200 DATABASE_URL=postgres://postgres@127.0.0.1:5499/test \
 *     npx tsx bench/postgres-cost.ts bare handmade try-claim
 *
 * (<dir> writable by the postgres user, readable by this script.) The report then gives
 * thousands of instructions per transaction, summed over the backends; read the minimum: the
 * first round re-plans the statements the ANALYZE invalidated, and the counts include the WAL
 * segments and pages a round happens to start. Give the server a long checkpoint_timeout, so
 * that no checkpoint's full-page writes land in one variant's round only.
 * One client by default, so nothing waits on a lock; rounds interleave the variants and the
 * report gives min, lower quartile and median per variant, so a busy moment of the machine moves
 * all of them, not one. The tables are ANALYZEd after the warm-up, as the bench does.
 */
import { existsSync, readFileSync } from 'node:fs';
import { sql } from 'kysely';
import pg from 'pg';
import { Ledger } from '../examples/ledger/ledger.js';
import { createInbox } from '../src/index.js';
import { newestDumpInstructions } from './callgrind.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
/** A positive integer from the environment, or the default; anything else stops the run, naming it. */
function positiveInteger(name: string, fallback: number): number {
  const text = process.env[name];
  const n = text === undefined ? fallback : Number(text);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name}=${text} must be a positive integer`);
  return n;
}
const ROUNDS = positiveInteger('ROUNDS', 15);
const TXS = positiveInteger('TXS', 300);
const CLIENTS = positiveInteger('CLIENTS', 1);
const HASH = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
const run = `pgcost_${process.pid}`;
const inboxSchema = `${run}_inbox`;
const ledgerSchema = `${run}_ledger`;

/** User + system CPU of one process, in ms (USER_HZ is 100 on Linux). */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

const INSTRUCTIONS = process.env.INSTRUCTIONS;
if (INSTRUCTIONS !== undefined && !existsSync(INSTRUCTIONS))
  throw new Error(`INSTRUCTIONS=${INSTRUCTIONS}: no such directory (callgrind's output directory)`);

type Query = string | { text: string; values: unknown[] };

/** The handler's two statements (examples/ledger/ledger.ts), as Kysely sends them. */
function ledgerWrite(id: string, i: number): Query[] {
  const key = `acct-${i % 1000}`;
  return [
    {
      text: `insert into "${ledgerSchema}"."accounts" ("key", "balance") values ($1, $2) on conflict ("key") do update set "balance" = accounts.balance + excluded.balance returning "balance"`,
      values: [key, 5],
    },
    {
      text: `insert into "${ledgerSchema}"."entries" ("key", "event_id", "seq", "amount") values ($1, $2, $3, $4)`,
      values: [key, id, null, 5],
    },
  ];
}

const BEGIN = 'begin isolation level read committed';
const claim = (id: string) =>
  `select * from "${inboxSchema}"."claim"('default', '${id}', null, null::bigint, '${HASH}', null, null::jsonb, true, false, false, 1000, 10000::bigint, '5000ms', true)`;
/** src/db/sql/record-applied.ts: the new event's row, with its result (null: none), at COMMIT. */
const recordApplied = (id: string, result: string | null) =>
  `insert into "${inboxSchema}"."events" (source, id, body_hash, status, processed_at, result, payload, headers) values ('default', '${id}', '${HASH}', 'processed', now(), ${result === null ? 'null' : `'${result}'`}::jsonb, null, null::jsonb)`;
/** The try-claim's statements (src/db/sql/try-claim.ts), PREPAREd. */
const TRY_LOCK = (source: string, id: string) =>
  `select pg_try_advisory_xact_lock(hashtextextended('${inboxSchema}.|' || length(${source}) || '|' || ${source} || '|' || ${id}, 0)) as locked`;
const READ = (source: string, id: string) =>
  `select null::boolean as locked, now() as now, e.status, e.body_hash, e.key, e.seq, e.result, e.attempts, e.received_at, e.dead_reason from (values (1)) as one left join "${inboxSchema}"."events" e on e.source = ${source} and e.id = ${id}`;
const RECORD_APPLIED = `insert into "${inboxSchema}"."events" (source, id, body_hash, status, processed_at, result, payload, headers) values ($1, $2, $3, 'processed', now(), $4, $5, $6)`;
const RECORD_APPLIED_ORDERED = `insert into "${inboxSchema}"."events" (source, id, key, seq, body_hash, status, processed_at, result) values ($1, $2, $3, $4, $5, 'processed', now(), $6)`;
const storeResult = (id: string) =>
  `update "${inboxSchema}"."events" set result = '{"balance":10}'::jsonb where source = 'default' and id = '${id}'`;
const plainInsert = (id: string) =>
  `insert into "${inboxSchema}"."events" (source, id, body_hash, status, processed_at) values ('default', '${id}', '${HASH}', 'processed', now()) on conflict (source, id) do nothing returning now()`;

/** `ordered`'s key and seq: the round's own keys (the id's prefix), each new at its first event, then advanced. */
function roundKey(id: string, i: number): { key: string; seq: number } {
  return { key: `${id.slice(0, id.lastIndexOf('-'))}-k${i % 50}`, seq: Math.floor(i / 50) + 1 };
}

/** An ordered event in its turn through the claim function, its row with key and seq at COMMIT. */
function claimInTurn(id: string, i: number, key: string, seq: number): Query[] {
  return [
    `${BEGIN}; execute wi_claim('default', '${id}', '${key}', ${seq}, '${HASH}', null, null, true, false, false, 1000, 10000, '5000ms', true); savepoint wi_apply`,
    ...ledgerWrite(id, i),
    `execute wi_record_applied_ordered('default', '${id}', '${key}', ${seq}, '${HASH}', '{"balance":10}'); commit`,
  ];
}

/**
 * An ordered event in its turn through the turn's try: the key row and the id's try-lock, then
 * `read`; at COMMIT the row, and the cursor's move in a statement of its own or in a CTE of the
 * row's INSERT.
 */
function turnsTry(
  id: string,
  i: number,
  key: string,
  seq: number,
  read: string,
  cursor: 'own' | 'cte',
): Query[] {
  return [
    `${BEGIN}; execute wi_try_turn_lock('default', '${id}', '${key}', ${seq}); execute ${read}('default', '${id}', '${key}', ${seq}); savepoint wi_apply`,
    ...ledgerWrite(id, i),
    cursor === 'cte'
      ? `execute wi_record_turn('default', '${id}', '${key}', ${seq}, '${HASH}', '{"balance":10}'); commit`
      : `execute wi_record_applied_ordered('default', '${id}', '${key}', ${seq}, '${HASH}', '{"balance":10}'); execute wi_move_cursor('default', '${key}', ${seq}); commit`,
  ];
}

/** `ordered`'s events, each but a key's first (a new key) through the turn's try. */
function throughTheTurnsTry(read: string, cursor: 'own' | 'cte') {
  return (id: string, i: number): Query[] => {
    const { key, seq } = roundKey(id, i);
    return seq === 1 ? claimInTurn(id, i, key, seq) : turnsTry(id, i, key, seq, read, cursor);
  };
}

/** turn-only: each key's last seq sent, across rounds. */
const turnSeqs = new Map<string, number>();

const VARIANTS: Record<string, { what: string; queries(id: string, i: number): Query[] }> = {
  bare: {
    what: 'BEGIN, the two ledger statements, COMMIT (the bench contender `bare`)',
    queries: (id, i) => [BEGIN, ...ledgerWrite(id, i), 'commit'],
  },
  inbox: {
    what: 'the inbox as text: BEGIN+claim (lock)+SAVEPOINT, the ledger, row with result+COMMIT',
    queries: (id, i) => [
      `${BEGIN}; ${claim(id)}; savepoint wi_apply`,
      ...ledgerWrite(id, i),
      `${recordApplied(id, '{"balance":10}')}; commit`,
    ],
  },
  'inbox-no-result': {
    what: 'the same for a handler that returns nothing (the row, without a result)',
    queries: (id, i) => [
      `${BEGIN}; ${claim(id)}; savepoint wi_apply`,
      ...ledgerWrite(id, i),
      `${recordApplied(id, null)}; commit`,
    ],
  },
  'inbox-no-savepoint': {
    what: 'the inbox without the SAVEPOINT (what a failed run is rolled back to)',
    queries: (id, i) => [
      `${BEGIN}; ${claim(id)}`,
      ...ledgerWrite(id, i),
      `${recordApplied(id, '{"balance":10}')}; commit`,
    ],
  },
  'inbox-prepared': {
    what: 'the claim function (what the try-claim replaces for a new unordered event; every ordered one still sends it), and the row, as EXECUTE of statements prepared once per connection',
    queries: (id, i) => [
      `${BEGIN}; execute wi_claim('default', '${id}', null, null, '${HASH}', null, null, true, false, false, 1000, 10000, '5000ms', true); savepoint wi_apply`,
      ...ledgerWrite(id, i),
      `execute wi_record_applied('default', '${id}', '${HASH}', '{"balance":10}', null, null); commit`,
    ],
  },
  'inbox-prepared-update': {
    what: 'before migration 0008, prepared: the claim inserts the row; the result is an UPDATE at COMMIT',
    queries: (id, i) => [
      `${BEGIN}; execute wi_claim('default', '${id}', null, null, '${HASH}', null, null, true, false, false, 1000, 10000, '5000ms', false); savepoint wi_apply`,
      ...ledgerWrite(id, i),
      `execute wi_store_result('default', '${id}', '{"balance":10}'); commit`,
    ],
  },
  'insert-and-result': {
    what: 'the claim function replaced by a plain INSERT (no lock_timeout, no ordering)',
    queries: (id, i) => [`${BEGIN}; ${plainInsert(id)}`, ...ledgerWrite(id, i), `${storeResult(id)}; commit`],
  },
  'lock-then-insert': {
    what: 'an advisory lock and a read of the id at BEGIN; the row inserted with its result at COMMIT',
    queries: (id, i) => [
      `${BEGIN}; select pg_advisory_xact_lock(hashtextextended('default:${id}', 0)); select status from "${inboxSchema}"."events" where source = 'default' and id = '${id}'`,
      ...ledgerWrite(id, i),
      `insert into "${inboxSchema}"."events" (source, id, body_hash, status, processed_at, result) values ('default', '${id}', '${HASH}', 'processed', now(), '{"balance":10}'); commit`,
    ],
  },
  'plain-sql-claim': {
    what: 'the unordered claim as plain statements: SET LOCAL lock_timeout, the advisory lock, a read of the id, lock_timeout back, SAVEPOINT; the row at COMMIT',
    queries: (id, i) => [
      `${BEGIN}; set local lock_timeout = '5000ms'; select pg_advisory_xact_lock(hashtextextended('x|7|default|${id}', 0)); select status, body_hash, result from "${inboxSchema}"."events" where source = 'default' and id = '${id}' for update; set local lock_timeout to default; savepoint wi_apply`,
      ...ledgerWrite(id, i),
      `execute wi_record_applied('default', '${id}', '${HASH}', '{"balance":10}', null, null); commit`,
    ],
  },
  'lock-only': {
    what: 'the advisory lock alone at BEGIN (prepared, no read, no SAVEPOINT); the row with its result at COMMIT',
    queries: (id, i) => [
      `${BEGIN}; execute wi_lock('x|7|default|${id}')`,
      ...ledgerWrite(id, i),
      `execute wi_record_applied('default', '${id}', '${HASH}', '{"balance":10}', null, null); commit`,
    ],
  },
  'insert-first': {
    what: 'the row inserted first (prepared, ON CONFLICT DO NOTHING, no lock), the ledger, the result as an UPDATE at COMMIT',
    queries: (id, i) => [
      `${BEGIN}; execute wi_insert_first('default', '${id}', '${HASH}')`,
      ...ledgerWrite(id, i),
      `execute wi_store_result('default', '${id}', '{"balance":10}'); commit`,
    ],
  },
  'insert-first-no-result': {
    what: 'the row inserted first (prepared, ON CONFLICT DO NOTHING), the ledger, COMMIT: a handler that returns nothing',
    queries: (id, i) => [
      `${BEGIN}; execute wi_insert_first('default', '${id}', '${HASH}')`,
      ...ledgerWrite(id, i),
      'commit',
    ],
  },
  'try-claim': {
    what: "what the inbox sends for a new unordered event: the try-claim (src/db/sql/try-claim.ts), two prepared statements (the id's try-lock, then the read, its snapshot taken after the lock); SAVEPOINT; the row at COMMIT",
    queries: (id, i) => [
      `${BEGIN}; execute wi_try_lock('default', '${id}'); execute wi_read('default', '${id}'); savepoint wi_apply`,
      ...ledgerWrite(id, i),
      `execute wi_record_applied('default', '${id}', '${HASH}', '{"balance":10}', null, null); commit`,
    ],
  },
  'try-claim-no-savepoint': {
    what: 'the try-claim without the SAVEPOINT after it (what a failed run is rolled back to): its price under load',
    queries: (id, i) => [
      `${BEGIN}; execute wi_try_lock('default', '${id}'); execute wi_read('default', '${id}')`,
      ...ledgerWrite(id, i),
      `execute wi_record_applied('default', '${id}', '${HASH}', '{"balance":10}', null, null); commit`,
    ],
  },
  'try-claim-plpgsql': {
    what: 'the try-claim as a small PL/pgSQL function instead (try the lock, then read); SAVEPOINT; the row at COMMIT',
    queries: (id, i) => [
      `${BEGIN}; execute wi_try_claim_fn('default', '${id}'); savepoint wi_apply`,
      ...ledgerWrite(id, i),
      `execute wi_record_applied('default', '${id}', '${HASH}', '{"balance":10}', null, null); commit`,
    ],
  },
  'try-claim-plain-read': {
    what: 'the try-claim with a plain primary-key read (no VALUES left join: no row at all when the id is new)',
    queries: (id, i) => [
      `${BEGIN}; execute wi_try_lock('default', '${id}'); execute wi_read_plain('default', '${id}'); savepoint wi_apply`,
      ...ledgerWrite(id, i),
      `execute wi_record_applied('default', '${id}', '${HASH}', '{"balance":10}', null, null); commit`,
    ],
  },
  'savepoint-only': {
    what: 'no claim: BEGIN and a SAVEPOINT, the ledger, the row with its result at COMMIT (the price of the SAVEPOINT)',
    queries: (id, i) => [
      `${BEGIN}; savepoint wi_apply`,
      ...ledgerWrite(id, i),
      `execute wi_record_applied('default', '${id}', '${HASH}', '{"balance":10}', null, null); commit`,
    ],
  },
  'events-row-only': {
    what: 'no claim, no savepoint: the ledger, then the inbox row with its result (prepared) riding on COMMIT',
    queries: (id, i) => [
      BEGIN,
      ...ledgerWrite(id, i),
      `execute wi_record_applied('default', '${id}', '${HASH}', '{"balance":10}', null, null); commit`,
    ],
  },
  ordered: {
    what: "a new ordered event in its turn, as the inbox sends it: the claim function (the id's lock, the key's row locked and its cursor moved; a new key's row inserted) and the row with its key and seq at COMMIT; 50 keys, four events each per round",
    queries: (id, i) => {
      const { key, seq } = roundKey(id, i);
      return claimInTurn(id, i, key, seq);
    },
  },
  'ordered-try-exists': {
    what: "ordered-try's first form: the seqs waiting read by two EXISTS in the read's target list, and the cursor's move a statement of its own after the row",
    queries: throughTheTurnsTry('wi_try_turn', 'own'),
  },
  'ordered-try-from': {
    what: "ordered-try-exists with the read's expressions in FROM and the seqs waiting one scan there (bool_or): ordered-try with the cursor a statement of its own",
    queries: throughTheTurnsTry('wi_try_turn_from', 'own'),
  },
  'ordered-try': {
    what: "the turn's try, tried and not kept (BENCHMARKS.md, \"The turn's try\"): a key's first event through the claim function, as `ordered`; each later one, which the instance would expect next, through two plain statements (the key row locked in its turn with FOR UPDATE SKIP LOCKED, then the id's try-lock; then the read of the id's row and of the seqs waiting), then the row and the cursor's move (a CTE of its INSERT) at COMMIT",
    queries: throughTheTurnsTry('wi_try_turn_from', 'cte'),
  },
  'turn-only': {
    what: "every event in its turn on a key that exists (50 keys kept across rounds, the first round's first events through the claim function): ordered-try's in-turn events alone",
    queries: (id, i) => {
      const key = `turn-k${i % 50}`;
      const seq = (turnSeqs.get(key) ?? 0) + 1;
      turnSeqs.set(key, seq);
      return seq === 1 ? claimInTurn(id, i, key, seq) : turnsTry(id, i, key, seq, 'wi_try_turn_from', 'cte');
    },
  },
  handmade: {
    what: 'the bench contender `handmade`: the id into a one-column table first (ON CONFLICT DO NOTHING), the ledger, COMMIT',
    queries: (id, i) => [
      BEGIN,
      {
        text: `insert into "${ledgerSchema}"."processed" (id) values ($1) on conflict do nothing returning id`,
        values: [id],
      },
      ...ledgerWrite(id, i),
      'commit',
    ],
  },
  'dedup-row-only': {
    what: 'the floor of any inbox: one plain INSERT of the dedup row, nothing else',
    queries: (id, i) => [`${BEGIN}; ${plainInsert(id)}`, ...ledgerWrite(id, i), 'commit'],
  },
};

const picked = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(VARIANTS);
for (const name of picked)
  if (!VARIANTS[name]) throw new Error(`unknown variant ${name}; one of ${Object.keys(VARIANTS)}`);
// Transaction i goes to connection i % CLIENTS, and an ordered variant's key is i % 50: unless
// CLIENTS divides 50, one key's seqs would race on two connections, and the claim would hold
// them (or the turn's try find no turn) instead of applying each in its turn.
const keyed = picked.filter((name) => name.startsWith('ordered') || name === 'turn-only');
if (keyed.length > 0 && 50 % CLIENTS !== 0)
  throw new Error(
    `CLIENTS=${CLIENTS} with ${keyed.join(', ')} must divide 50 (each of their 50 keys then stays on one connection, its seqs in order)`,
  );

// The inbox's tables and functions, as createInbox migrates them; the ledger's tables.
const inbox = createInbox({ db: url, schema: inboxSchema, handle: () => undefined });
const kysely = await inbox.kysely();
await new Ledger(ledgerSchema).setup(kysely);
await kysely.schema
  .createTable(`${ledgerSchema}.processed`)
  .addColumn('id', 'text', (c) => c.primaryKey())
  .execute();
// PRE_SQL: statements run once the tables exist, SCHEMA standing for the inbox's schema: the
// price of one part of the table, e.g. PRE_SQL='drop index SCHEMA.events_dead'.
if (process.env.PRE_SQL)
  await sql.raw(process.env.PRE_SQL.replaceAll('SCHEMA', `"${inboxSchema}"`)).execute(kysely);
await inbox.close();

/** Prepares every variant's statements on one connection; its backend's pid. */
async function prepared(client: pg.Client): Promise<number> {
  const pid = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0].pid;
  await client.query(
    `prepare wi_claim (text, text, text, bigint, text, bytea, jsonb, boolean, boolean, boolean, integer, bigint, text, boolean) as select * from "${inboxSchema}"."claim"($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
  );
  await client.query(
    `prepare wi_record_applied (text, text, text, jsonb, bytea, jsonb) as ${RECORD_APPLIED}`,
  );
  await client.query(
    `prepare wi_record_applied_ordered (text, text, text, bigint, text, jsonb) as ${RECORD_APPLIED_ORDERED}`,
  );
  await client.query(
    `prepare wi_store_result (text, text, jsonb) as update "${inboxSchema}"."events" set result = $3 where source = $1 and id = $2`,
  );
  await client.query(`prepare wi_read (text, text) as ${READ('$1', '$2')}`);
  await client.query(`prepare wi_lock (text) as select pg_advisory_xact_lock(hashtextextended($1, 0))`);
  await client.query(
    `prepare wi_insert_first (text, text, text) as insert into "${inboxSchema}"."events" (source, id, body_hash, status, processed_at) values ($1, $2, $3, 'processed', now()) on conflict (source, id) do nothing returning received_at`,
  );
  await client.query(`prepare wi_try_lock (text, text) as ${TRY_LOCK('$1', '$2')}`);
  await client.query(`create or replace function "${inboxSchema}".try_claim(p_source text, p_id text, out locked boolean, out status text, out body_hash text, out key text, out seq bigint, out result jsonb, out attempts integer, out received_at timestamptz, out dead_reason text)
    language plpgsql as $fn$
    begin
      locked := pg_try_advisory_xact_lock(hashtextextended('${inboxSchema}.|' || length(p_source) || '|' || p_source || '|' || p_id, 0));
      select e.status, e.body_hash, e.key, e.seq, e.result, e.attempts, e.received_at, e.dead_reason
        into status, body_hash, key, seq, result, attempts, received_at, dead_reason
        from "${inboxSchema}".events e where e.source = p_source and e.id = p_id;
      if not found then received_at := now(); end if;
    end $fn$`);
  await client.query(
    `prepare wi_try_claim_fn (text, text) as select * from "${inboxSchema}".try_claim($1, $2)`,
  );
  const waitingAt = (seq: string) =>
    `exists (select 1 from "${inboxSchema}"."events" w where w.source = $1 and w.key = $3 and w.seq = ${seq} and w.status in ('held', 'pending'))`;
  await client.query(
    `prepare wi_try_turn_lock (text, text, text, bigint) as select pg_try_advisory_xact_lock(hashtextextended('${inboxSchema}.|' || length($1) || '|' || $1 || '|' || $2, 0)) as locked from (select 1 from "${inboxSchema}"."keys" k where k.source = $1 and k.key = $3 and k.next_seq = $4 and k.state = 'open' for update skip locked) as turn`,
  );
  await client.query(
    `prepare wi_try_turn (text, text, text, bigint) as select null::boolean as locked, ${waitingAt('$4')} as seq_taken, ${waitingAt('$4 + 1')} as drain, (extract(epoch from coalesce(e.received_at, now())) * 1000)::float8 as received_ms, e.status, e.body_hash, e.key, e.seq, e.result::text as result, e.attempts, e.dead_reason from (values (1)) as one left join "${inboxSchema}"."events" e on e.source = $1 and e.id = $2`,
  );
  await client.query(
    `prepare wi_try_turn_from (text, text, text, bigint) as select null::boolean as locked, w.seq_taken, w.drain, e.received_ms, e.status, e.body_hash, e.key, e.seq, e.result, e.attempts, e.dead_reason from (values (1)) as one left join (select (extract(epoch from e.received_at) * 1000)::float8 as received_ms, e.status, e.body_hash, e.key, e.seq, e.result::text as result, e.attempts, e.dead_reason from "${inboxSchema}"."events" e where e.source = $1 and e.id = $2) e on true cross join (select bool_or(w.seq = $4) as seq_taken, bool_or(w.seq = $4 + 1) as drain from "${inboxSchema}"."events" w where w.source = $1 and w.key = $3 and w.seq between $4 and $4 + 1 and w.status in ('held', 'pending')) w`,
  );
  await client.query(
    `prepare wi_record_turn (text, text, text, bigint, text, jsonb) as with moved as (update "${inboxSchema}"."keys" set next_seq = $4 + 1, updated_at = now() where source = $1 and key = $3 and next_seq = $4) insert into "${inboxSchema}"."events" (source, id, key, seq, body_hash, status, processed_at, result) values ($1, $2, $3, $4, $5, 'processed', now(), $6)`,
  );
  await client.query(
    `prepare wi_move_cursor (text, text, bigint) as update "${inboxSchema}"."keys" set next_seq = $3 + 1, updated_at = now() where source = $1 and key = $2 and next_seq = $3`,
  );
  await client.query(
    `prepare wi_read_plain (text, text) as select e.status, e.body_hash, e.key, e.seq, e.result, e.attempts, e.received_at, e.dead_reason from "${inboxSchema}"."events" e where e.source = $1 and e.id = $2`,
  );
  return pid;
}
const client = new pg.Client({ connectionString: url });
await client.connect();
const others: pg.Client[] = [];
try {
  const pid = await prepared(client);
  const pids = [pid];
  for (let c = 1; c < CLIENTS; c++) {
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    others.push(other);
    pids.push(await prepared(other));
  }
  const clients = [client, ...others];
  const tag = Date.now().toString(36);
  const perTx = new Map<string, number[]>(picked.map((name) => [name, []]));
  const tps = new Map<string, number[]>(picked.map((name) => [name, []]));
  // WAL written per transaction: what the WAL writer and the commit's flush pay for, on every
  // backend's behalf, beyond this backend's CPU (one client: nothing else writes meanwhile,
  // but autovacuum may; the median keeps that out).
  const walBytes = new Map<string, number[]>(picked.map((name) => [name, []]));
  const walAt = async () =>
    BigInt(
      (await client.query<{ lsn: string }>('select pg_current_wal_insert_lsn() as lsn')).rows[0].lsn
        .split('/')
        .reduce((n, part) => n * 0x100000000n + BigInt(`0x${part}`), 0n),
    );
  // The count is shared out among the connections; each sends its transactions one after another.
  const send = async (name: string, prefix: string, count: number) => {
    await Promise.all(
      clients.map(async (c, k) => {
        for (let i = k; i < count; i += clients.length)
          for (const q of VARIANTS[name].queries(`${prefix}-${i}`, i)) await c.query(q as pg.QueryConfig);
      }),
    );
  };
  const cpuAll = () => pids.reduce((n, p) => n + cpuMs(p), 0);
  for (const name of picked) await send(name, `warm-${tag}-${name}`, 100);
  // As the bench does after its warm-up: the planner then knows the tables (a primary-key read
  // on a never-analysed table is planned as a bitmap scan).
  await client.query(
    `analyze "${inboxSchema}".events; analyze "${ledgerSchema}".accounts; analyze "${ledgerSchema}".entries; analyze "${ledgerSchema}".processed`,
  );
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of picked) {
      const walBefore = await walAt();
      if (INSTRUCTIONS) await Promise.all(clients.map((c) => c.query('select pg_sleep(0)')));
      const before = INSTRUCTIONS ? 0 : cpuAll();
      const startedAt = performance.now();
      await send(name, `m-${tag}-${round}-${name}`, TXS);
      if (INSTRUCTIONS) {
        await Promise.all(clients.map((c) => c.query('select pg_backend_pid()')));
        // Thousands of instructions per transaction, in place of µs.
        perTx
          .get(name)!
          .push(pids.reduce((n, p) => n + newestDumpInstructions(INSTRUCTIONS, p), 0) / 1000 / TXS);
      } else perTx.get(name)!.push(((cpuAll() - before) * 1000) / TXS);
      tps.get(name)!.push(TXS / ((performance.now() - startedAt) / 1000));
      walBytes.get(name)!.push(Number((await walAt()) - walBefore) / TXS);
    }
  }
  const at = (xs: number[], q: number) => xs[Math.floor((xs.length - 1) * q)];
  const bare = perTx.get('bare')?.sort((a, b) => a - b);
  console.log(
    `PostgreSQL ${INSTRUCTIONS ? 'instructions (thousands)' : 'CPU'} per transaction (${CLIENTS === 1 ? 'one backend' : `${CLIENTS} connections at once, their backends summed`}), ${ROUNDS} rounds × ${TXS}; ${INSTRUCTIONS ? 'k instructions' : 'µs'}: min / q1 / median; WAL bytes and transactions per second (medians)`,
  );
  for (const name of picked) {
    const xs = perTx.get(name)!.sort((a, b) => a - b);
    const wal = walBytes.get(name)!.sort((a, b) => a - b);
    const tp = tps.get(name)!.sort((a, b) => a - b);
    const ratio = bare ? `  ${(at(xs, 0.5) / at(bare, 0.5)).toFixed(2)}× bare` : '';
    console.log(
      `${name.padEnd(20)} ${at(xs, 0).toFixed(0).padStart(5)} / ${at(xs, 0.25).toFixed(0).padStart(5)} / ${at(xs, 0.5).toFixed(0).padStart(5)}${ratio}  ${at(wal, 0.5).toFixed(0).padStart(5)} B WAL ${at(tp, 0.5).toFixed(0).padStart(6)} tx/s  ${VARIANTS[name].what}`,
    );
  }
} finally {
  await client.query(
    `drop schema if exists "${inboxSchema}" cascade; drop schema if exists "${ledgerSchema}" cascade`,
  );
  await client.end();
  for (const other of others) await other.end();
}
