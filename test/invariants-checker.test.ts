/**
 * checkInvariants (webhook-inbox/testing) finds each broken rule it names: rows planted the way
 * the races of the ordering state machine used to leave them, one per rule, are listed, and
 * a healthy inbox's tables give an empty list. The suites rely on it after every test.
 */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { createInbox } from '../src/index.js';
import { assertInvariants, checkInvariants, InvariantsError } from '../src/testing/index.js';
import { targets } from './support/databases.js';
import { perTestSchemas } from './support/per-test-schemas.js';

const SETUP = 180_000;

describe.each(targets)('the invariants checker on $name', (target) => {
  const schemas = perTestSchemas(target);

  it(
    'lists each kind of violation, and nothing for healthy tables',
    async () => {
      const t = schemas();
      const inbox = createInbox({ db: t.db, schema: t.schema, sweepIntervalMs: 0, handle: () => {} });
      try {
        const delivery = (id: string, key: string, seq: number) => ({
          headers: { 'idempotency-key': id, 'x-key': key, 'x-seq': String(seq) },
          rawBody: Buffer.from('{}'),
        });
        expect((await inbox.receive(delivery('ok:1', 'ok', 1))).status).toBe(200);
        expect((await inbox.receive(delivery('ok:3', 'ok', 3))).status).toBe(202);
        const db = await inbox.kysely();
        expect(await checkInvariants(db, inbox.tables)).toEqual([]);
        await assertInvariants(db, inbox.tables);

        const { events, keys, gaps } = inbox.tables;
        const e = sql.raw(events);
        const src = inbox.options.source;
        await sql`insert into ${sql.raw(keys)} (source, key, next_seq, stream) values (${src}, 'below', 3, 'below'), (${src}, 'ahead', 2, 'ahead')`.execute(
          db,
        );
        // The unique index forbids two waiting events at one seq; an older version allowed it.
        await sql.raw(`drop index "${t.schema}"."events_waiting"`).execute(db);
        await sql`insert into ${e} (source, id, key, seq, body_hash, status, dead_reason, stream) values
          (${src}, 'below:1', 'below', 1, 'x', 'held', null, 'below'),
          (${src}, 'nokey:1', 'nokey', 1, 'x', 'pending', null, 'nokey'),
          (${src}, 'ok:3-twin', 'ok', 3, 'x', 'held', null, 'ok'),
          (${src}, 'dead:1', null, null, 'x', 'dead', null, 'dead:1'),
          (${src}, 'ahead:2', 'ahead', 2, 'x', 'processed', null, 'ahead')`.execute(db);
        await sql`insert into ${sql.raw(gaps)} (source, key, from_seq, to_seq, reason, stream) values (${src}, 'ahead', 2, 4, 'skip', 'ahead')`.execute(
          db,
        );

        const found = await checkInvariants(db, inbox.tables);
        expect(found.map((v) => [v.rule, v.key, v.seq, [...v.ids].sort()])).toEqual([
          ['waiting-below-cursor', 'below', 1, ['below:1']],
          ['waiting-without-cursor', 'nokey', 1, ['nokey:1']],
          ['two-waiting-at-one-seq', 'ok', 3, ['ok:3', 'ok:3-twin']],
          ['dead-without-reason', null, null, ['dead:1']],
          ['processed-at-or-above-cursor', 'ahead', 2, ['ahead:2']],
          ['gap-reaches-cursor', 'ahead', 2, []],
        ]);
        const error = await assertInvariants(db, inbox.tables).catch((err) => err);
        expect(error).toBeInstanceOf(InvariantsError);
        expect((error as InvariantsError).violations).toHaveLength(6);
        expect((error as Error).message).toMatch(/waiting-below-cursor \(source default, key below, seq 1/);
      } finally {
        await inbox.close();
      }
    },
    SETUP,
  );
});
