/**
 * What one new event costs embedded PGlite, statement by statement: the time of one transaction
 * on one PGlite instance in this process (PGlite is one session and runs on the calling thread,
 * so its time is its CPU), for the bare ledger write and for the inbox's transaction with parts
 * of it taken away. The counterpart of bench/postgres-cost.ts for the `inbox-pglite` and
 * `bare-pglite` cells of the bench.
 *
 *   npx tsx bench/pglite-cost.ts                    every variant, 6 rounds of 1000 transactions
 *   ROUNDS=10 TXS=2000 npx tsx bench/pglite-cost.ts bare inbox row-only
 *
 * The texts are what the inbox sends for a new unordered event on PGlite (src/db/drivers/pglite.ts
 * folds as on pg: BEGIN with the try-claim's two prepared statements and the SAVEPOINT in one
 * call, the handler's two statements, the row with its result folded into COMMIT); the
 * handler's statements go through `query` with parameters, as Kysely sends them. Rounds
 * interleave the variants; the report gives the median per variant. Nothing else may run
 * meanwhile: the figures are wall time.
 */
import { PGlite } from '@electric-sql/pglite';
import { Ledger } from '../examples/ledger/ledger.js';
import { createInbox } from '../src/index.js';

const ROUNDS = Number(process.env.ROUNDS ?? 6);
const TXS = Number(process.env.TXS ?? 1000);
const HASH = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
const BEGIN = 'begin isolation level read committed';

const db = new PGlite();
// The inbox's tables as createInbox migrates them; the ledger's tables.
const inbox = createInbox({ db, schema: 'wi', handle: () => undefined });
await new Ledger('lg').setup(await inbox.kysely());
await db.exec(`
prepare try_lock (text, text) as select pg_try_advisory_xact_lock(hashtextextended('wi.|' || length($1) || '|' || $1 || '|' || $2, 0)) as locked;
prepare try_read (text, text) as select null::boolean as locked, now() as now, e.status, e.body_hash, e.key, e.seq, e.result, e.attempts, e.received_at, e.dead_reason from (values (1)) as one left join wi.events e on e.source = $1 and e.id = $2;
prepare plain_read (text, text) as select e.status, e.body_hash, e.key, e.seq, e.result, e.attempts, e.received_at, e.dead_reason from wi.events e where e.source = $1 and e.id = $2;
prepare record_applied (text, text, text, jsonb) as insert into wi.events (source, id, key, seq, body_hash, status, processed_at, result, payload, headers) values ($1, $2, null, null, $3, 'processed', now(), $4, null, null);
`);

/** The handler's two statements (examples/ledger/ledger.ts), as Kysely sends them. */
async function ledgerWrite(id: string, i: number): Promise<void> {
  const key = `acct-${i % 1000}`;
  await db.query(
    'insert into "lg"."accounts" ("key", "balance") values ($1, $2) on conflict ("key") do update set "balance" = accounts.balance + excluded.balance returning "balance"',
    [key, 5],
  );
  await db.query('insert into "lg"."entries" ("key", "event_id", "seq", "amount") values ($1, $2, $3, $4)', [
    key,
    id,
    null,
    5,
  ]);
}

/** A transaction: what rides on BEGIN, the ledger, what rides on COMMIT. */
function transaction(atBegin: (id: string) => string, atCommit: (id: string) => string) {
  return async (id: string, i: number) => {
    await db.exec(atBegin(id));
    await ledgerWrite(id, i);
    await db.exec(atCommit(id));
  };
}
const row = (id: string) => `execute record_applied('default', '${id}', '${HASH}', '{"balance":10}'); commit`;

const VARIANTS: Record<string, { what: string; run(id: string, i: number): Promise<void> }> = {
  bare: {
    what: 'BEGIN, the two ledger statements, COMMIT (the bench contender `bare-pglite`)',
    run: transaction(
      () => BEGIN,
      () => 'commit',
    ),
  },
  inbox: {
    what: "what the inbox sends: the id's try-lock and the read, SAVEPOINT; the row with its result at COMMIT",
    run: transaction(
      (id) =>
        `${BEGIN}; execute try_lock('default', '${id}'); execute try_read('default', '${id}'); savepoint wi_apply`,
      row,
    ),
  },
  'no-lock': {
    what: 'the same without the try-lock',
    run: transaction((id) => `${BEGIN}; execute try_read('default', '${id}'); savepoint wi_apply`, row),
  },
  'read-and-row': {
    what: 'no lock, no SAVEPOINT: the read at BEGIN, the row at COMMIT',
    run: transaction((id) => `${BEGIN}; execute try_read('default', '${id}')`, row),
  },
  'plain-read-and-row': {
    what: 'the same with a plain primary-key read (no VALUES left join: no row when the id is new)',
    run: transaction((id) => `${BEGIN}; execute plain_read('default', '${id}')`, row),
  },
  'row-only': {
    what: 'no read either: the ledger, then the row with its result at COMMIT (the floor of an inbox that records a result)',
    run: transaction(() => BEGIN, row),
  },
};

const picked = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(VARIANTS);
for (const name of picked)
  if (!VARIANTS[name]) throw new Error(`unknown variant ${name}; one of ${Object.keys(VARIANTS)}`);

const perTx = new Map<string, number[]>(picked.map((name) => [name, []]));
for (const name of picked) for (let i = 0; i < 200; i++) await VARIANTS[name].run(`warm-${name}-${i}`, i);
await db.exec('analyze');
for (let round = 0; round < ROUNDS; round++) {
  for (const name of picked) {
    const startedAt = performance.now();
    for (let i = 0; i < TXS; i++) await VARIANTS[name].run(`m-${round}-${name}-${i}`, i);
    perTx.get(name)!.push(((performance.now() - startedAt) * 1000) / TXS);
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const bare = perTx.has('bare') ? median(perTx.get('bare')!) : undefined;
console.log(`PGlite time per transaction, ${ROUNDS} rounds × ${TXS}; µs, median (throughput against bare)`);
for (const name of picked) {
  const us = median(perTx.get(name)!);
  const ratio = bare ? `  ${(bare / us).toFixed(2)}× bare` : '';
  console.log(`${name.padEnd(20)} ${us.toFixed(0).padStart(5)}${ratio}   ${VARIANTS[name].what}`);
}
await inbox.close();
await db.close();
