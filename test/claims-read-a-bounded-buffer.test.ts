/**
 * A claim of an ordered key costs the same whether its key holds ten events or a million, and
 * so does `advance`: every statement they run under the key's lock reads at most one entry of
 * the buffer and of the key's gaps. Checked where it broke: a table ANALYZE has never seen (a
 * new deployment's first minute, autovacuum off here so that it stays so), where PostgreSQL
 * planned `max(seq)` over the key's waiting rows as an aggregate over all of them, and every
 * claim of the ingest contract's one stream read the whole buffer while holding the key (issue
 * 41: 184 answers/s, p95 563 ms). PostgreSQL's own auto_explain reports the rows each nested
 * statement read (ANALYZE, sent to the client as notices), on real PostgreSQL. A claim below
 * the cursor whose id has no row asks whether another id was applied at its seq: that read went
 * over every event of the source (the index of applied seqs held processed rows, not ignored
 * ones), and with statistics over the whole table.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTables } from '../src/db/sql/tables.js';
import { createInbox, type Inbox } from '../src/index.js';
import { postgresTarget, postgresUrl, uniqueName } from './support/databases.js';
import { ordered } from './support/ordering.js';
import { type RecordedPool, recordedPool, type Scan } from './support/plans.js';

/** Rows seeded in each key's buffer (or gaps): a claim that read them all would show it. */
const BUFFER = 2000;
/** The background count behind `maxPending` (src/db/sql/count-pending.ts), which may run while a claim is recorded. */
const PENDING_COUNT = /^select count\(\*\)::int as n from .* status = 'pending'$/;

describe.runIf(postgresTarget)("a claim reads one entry of its key's buffer, whatever its size", () => {
  const schema = uniqueName('wi');
  const tables = createTables(schema, '');
  const source = 'bounded';
  let admin: pg.Pool;
  let recorded: pg.Pool;
  let scansDuring: RecordedPool['scansDuring'];
  let inbox: Inbox;

  beforeAll(async () => {
    admin = new pg.Pool({ connectionString: postgresUrl!, max: 2 });
    ({ pool: recorded, scansDuring } = recordedPool(postgresUrl!));
    // Acknowledgements on the recorded pool itself (no pool of their own), nothing in the
    // background but the pending count behind maxPending (every 500 ms, not under a key's lock).
    inbox = createInbox({
      db: recorded,
      schema,
      source,
      mode: 'deferred',
      workers: 0,
      ackPoolSize: 0,
      sweepIntervalMs: 0,
      // The ingest contract's bounds: the buffer's bound is far, so nothing counts the buffer
      // (a count, near the bound only, is the one read that grows with it; src/db/sql/claim.ts).
      maxHeldPerKey: 1_000_000,
      maxSeqAhead: 1_000_000,
      handle: () => {},
    });
    await inbox.ready();
    await admin.query(`
      alter table ${tables.events} set (autovacuum_enabled = off);
      alter table ${tables.gaps} set (autovacuum_enabled = off);
      alter table ${tables.keys} set (autovacuum_enabled = off);
      -- 'stream': cursor at 1, seqs 2..${BUFFER + 1} held.
      insert into ${tables.keys} (source, key, next_seq, stream) values ('${source}', 'stream', 1, 'stream');
      insert into ${tables.events} (source, id, key, seq, body_hash, status, payload, stream)
        select '${source}', 'stream:' || g, 'stream', g, 'h', 'held', '\\x7b7d'::bytea, 'stream'
          from generate_series(2, ${BUFFER + 1}) g;
      -- 'late': cursor past ${2 * BUFFER}, every even seq below it skipped by a gap timeout.
      insert into ${tables.keys} (source, key, next_seq, stream) values ('${source}', 'late', ${2 * BUFFER + 1}, 'late');
      insert into ${tables.gaps} (source, key, from_seq, to_seq, reason, stream)
        select '${source}', 'late', 2 * g, 2 * g, 'timeout', 'late' from generate_series(1, ${BUFFER}) g;
      -- 'advance': seq 1 being applied, seq 2 missing, seqs 3..${BUFFER + 2} held for an hour.
      insert into ${tables.keys} (source, key, next_seq, stream) values ('${source}', 'advance', 1, 'advance');
      insert into ${tables.events} (source, id, key, seq, body_hash, status, payload, received_at, stream)
        select '${source}', 'advance:' || g, 'advance', g, 'h', 'held', '\\x7b7d'::bytea, now() - interval '1 hour', 'advance'
          from generate_series(3, ${BUFFER + 2}) g;`);
    const { rows } = await admin.query(`select reltuples from pg_class where oid = $1::regclass`, [
      tables.events,
    ]);
    expect(Number(rows[0].reltuples)).toBe(-1); // never analyzed, as the test means it
  });
  afterAll(async () => {
    await inbox?.close();
    await recorded?.end();
    await admin?.query(`drop schema if exists "${schema}" cascade`);
    await admin?.end();
  });

  function readsAtMostOneRow(found: Scan[], relation: 'events' | 'gaps') {
    const onIt = found.filter((s) => s.node.includes(` on ${relation}`));
    // The statements that read it were recorded: the claim (or advance) really ran here.
    expect(onIt.length).toBeGreaterThan(0);
    for (const s of found.filter((s) => !PENDING_COUNT.test(s.statement)))
      expect(s.rows, `${s.node} in: ${s.statement}`).toBeLessThanOrEqual(1);
  }

  it(`a held claim behind ${BUFFER} held events reads one of them (the buffer's highest seq)`, async () => {
    let answer: Awaited<ReturnType<Inbox['receive']>> | undefined;
    const found = await scansDuring(async () => (answer = await inbox.receive(ordered('stream', 5000))));
    expect(answer).toMatchObject({ status: 202, kind: 'held' });
    readsAtMostOneRow(found, 'events');
    expect(found.map((s) => s.node)).toContainEqual(expect.stringMatching(/Backward using events_waiting/));
  });

  it(`a claim below the cursor reads one of ${BUFFER} gaps (the last one starting at or below its seq) and no event but its own`, async () => {
    let late: Awaited<ReturnType<Inbox['receive']>> | undefined;
    let applied: Awaited<ReturnType<Inbox['receive']>> | undefined;
    const found = await scansDuring(async () => {
      late = await inbox.receive(ordered('late', 2 * BUFFER - 2)); // inside the gap [3998, 3998]
      // Between two gaps, no row: was another id applied (processed or ignored) at this seq?
      applied = await inbox.receive(ordered('late', 2 * BUFFER - 1));
    });
    expect(late).toMatchObject({ status: 200, kind: 'dead-lettered' });
    expect(applied).toMatchObject({ status: 200, kind: 'duplicate' });
    readsAtMostOneRow(found, 'gaps');
    expect(found.map((s) => s.node)).toContainEqual(
      expect.stringMatching(/using events_applied_seq on events/),
    );
  });

  it(`advance past a timed-out gap reads one of the ${BUFFER} events behind it (the first)`, async () => {
    const client = await recorded.connect();
    try {
      // What a worker sends after seq 1's handler: the gap at 2 is due (an event behind it has
      // waited an hour against a 1 s timeout), so the key is blocked there.
      let row: Record<string, unknown> | undefined;
      const found = await scansDuring(async () => {
        const { rows } = await client.query(
          `select * from ${tables.fn('advance')}($1, 'advance', 1, 1000, 'block')`,
          [source],
        );
        row = rows[0];
      });
      expect(row).toMatchObject({ more: false, skipped_from: '2', blocked: true });
      readsAtMostOneRow(found, 'events');
    } finally {
      client.release();
    }
    const { rows } = await admin.query(`select state, blocked_seq from ${tables.keys} where key = 'advance'`);
    expect(rows[0]).toMatchObject({ state: 'blocked', blocked_seq: '2' });
  });
});
