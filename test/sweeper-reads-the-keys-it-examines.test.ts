/**
 * A sweeper pass costs what the keys it examines cost, not what every waiting event of the
 * source costs: it runs on every instance, on a connection the acknowledgements share, so a
 * pass that aggregated a deferred backlog would hold that connection for as long as the backlog
 * takes to read. A pass walks the keys in key order, a few index entries each, examines a
 * bounded number of them, and the next pass goes on from the last one (src/db/sql/sweep.ts), so
 * every key's turn comes round.
 */
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTables } from '../src/db/sql/tables.js';
import { createInbox, type Inbox } from '../src/index.js';
import { postgresTarget, postgresUrl, targets, uniqueName } from './support/databases.js';
import { type RecordedPool, recordedPool } from './support/plans.js';

/** Keys of the backlog, and events each holds behind the one at its cursor. */
const KEYS = 200;
const BEHIND = 50;

describe.runIf(postgresTarget)('a sweep step reads a few index entries per key it examines', () => {
  const schema = uniqueName('wi');
  const t = createTables(schema, '');
  let admin: pg.Pool;
  let recorded: pg.Pool;
  let scansDuring: RecordedPool['scansDuring'];
  let inbox: Inbox;

  beforeAll(async () => {
    admin = new pg.Pool({ connectionString: postgresUrl!, max: 2 });
    ({ pool: recorded, scansDuring } = recordedPool(postgresUrl!, 1));
    inbox = createInbox({
      db: admin,
      schema,
      source: 's',
      mode: 'deferred',
      workers: 0,
      sweepIntervalMs: 0,
      handle: () => {},
    });
    await inbox.ready();
    // A deferred backlog: every key's event at its cursor pending (a drain for the workers),
    // BEHIND events held after it.
    await admin.query(`
      insert into ${t.keys} (source, key, next_seq, stream)
        select 's', 'k' || lpad(k::text, 4, '0'), 1, 'k' || lpad(k::text, 4, '0') from generate_series(1, ${KEYS}) k;
      insert into ${t.events} (source, id, key, seq, body_hash, status, payload, stream)
        select 's', k || ':' || g, 'k' || lpad(k::text, 4, '0'), g, 'h', case when g = 1 then 'pending' else 'held' end, '\\x7b7d'::bytea,
               'k' || lpad(k::text, 4, '0')
          from generate_series(1, ${KEYS}) k, generate_series(1, ${BEHIND + 1}) g;`);
  });
  afterAll(async () => {
    await inbox?.close();
    await recorded?.end();
    await admin?.query(`drop schema if exists "${schema}" cascade`);
    await admin?.end();
  });

  /** Rows of `events` PostgreSQL read for `statement`, and the rows it returned; nothing kept. */
  async function eventsReadBy(statement: string): Promise<{ read: number; rows: any[] }> {
    const client = await recorded.connect();
    try {
      await client.query('begin');
      let rows: any[] = [];
      const scans = await scansDuring(async () => ({ rows } = await client.query(statement)));
      await client.query('rollback');
      const read = scans.filter((s) => s.node.endsWith(' on events')).reduce((n, s) => n + s.rows, 0);
      return { read, rows };
    } finally {
      client.release();
    }
  }

  it(`chooses the ${KEYS} keys of a ${KEYS * (BEHIND + 1)}-event backlog reading a few entries of each`, async () => {
    const walk = await eventsReadBy(`select * from ${t.fn('sweep')}('s', 30000, 'skip', 500, null, 1000)`);
    expect(walk.rows).toHaveLength(KEYS);
    expect(walk.rows.every((r) => r.action === 'drain')).toBe(true);
    // Per key: the walk's next key, its first waiting seq, and that seq again under its lock.
    expect(walk.read).toBeLessThanOrEqual(4 * KEYS);
  });
});

describe.each(targets)('the sweeper walks the keys on $name', (target) => {
  let close: () => Promise<void>;
  let inbox: Inbox;
  let db: Kysely<any>;

  beforeAll(async () => {
    const opened = await target.open();
    inbox = createInbox({
      db: opened.db,
      schema: opened.schema,
      source: 's',
      sweepIntervalMs: 0,
      // An hour: a gap seeded just now stays young however slowly the test runs.
      gapTimeoutMs: 3_600_000,
      onGapTimeout: 'block',
      handle: () => {},
    });
    close = async () => {
      await inbox.close();
      await opened.close();
    };
    await inbox.ready();
    db = await inbox.kysely();
  });
  afterAll(() => close?.());

  /** `keys` keys named `prefix`0001…, each missing seq 1 with seq 2 held since `ago`. */
  async function seedGaps(prefix: string, keys: number, ago: string): Promise<void> {
    const t = inbox.tables;
    await sql
      .raw(`
        insert into ${t.keys} (source, key, next_seq, stream)
          select 's', '${prefix}' || lpad(k::text, 4, '0'), 1, '${prefix}' || lpad(k::text, 4, '0') from generate_series(1, ${keys}) k;
        insert into ${t.events} (source, id, key, seq, body_hash, status, payload, received_at, stream)
          select 's', '${prefix}' || k, '${prefix}' || lpad(k::text, 4, '0'), 2, 'h', 'held', '\\x7b7d'::bytea, now() - interval '${ago}',
                 '${prefix}' || lpad(k::text, 4, '0')
            from generate_series(1, ${keys}) k;`)
      .execute(db);
  }

  async function blocked(prefix: string): Promise<string[]> {
    const { rows } = await sql<{ key: string }>`
      select key from ${sql.table(`${inbox.tables.schema}.${inbox.tables.prefix}keys`)}
       where state = 'blocked' and key like ${`${prefix}%`} order by key`.execute(db);
    return rows.map((r) => r.key);
  }

  it('a step starting after a key goes round to it: every key is examined once', async () => {
    await seedGaps('w', 5, '2 hours');
    const { rows } = await sql<{ key: string; action: string }>`
      select key, action from ${sql.raw(inbox.tables.fn('sweep'))}('s', 3600000, 'block', 500, 'w0003', 1000)`.execute(
      db,
    );
    expect(rows).toEqual(
      ['w0004', 'w0005', 'w0001', 'w0002', 'w0003'].map((key) => ({ key, action: 'blocked' })),
    );
    expect(await blocked('w')).toHaveLength(5);
  });

  it("a pass examines a bounded number of keys and the next goes on after the last: a young gap's keys do not keep the due ones waiting", async () => {
    // 1,200 keys whose gaps are young (they sort first), then 300 whose gaps timed out.
    await seedGaps('x', 1200, '0 seconds');
    await seedGaps('y', 300, '2 hours');
    const first = await inbox.sweep();
    expect(first.keysBlocked).toBe(0); // the first 1,000 keys examined: young gaps only
    const second = await inbox.sweep();
    expect(second.keysBlocked).toBe(300);
    expect(await blocked('y')).toHaveLength(300);
    expect(await blocked('x')).toEqual([]);
  });
});
