import { sql } from 'kysely';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { postgresTarget, type TargetDb } from './support/databases.js';

// Real PostgreSQL only: PGlite has no backends to terminate.
describe.skipIf(!postgresTarget)(
  'a backend terminated while the handler awaits inside its transaction',
  () => {
    let t: TargetDb;
    let inbox: Inbox;
    let admin: pg.Pool;
    let terminateOnce = true;
    const applied: string[] = [];
    beforeAll(async () => {
      t = await postgresTarget!.open();
      admin = t.another() as pg.Pool;
      inbox = createInbox({
        db: t.db,
        schema: t.schema,
        sweepIntervalMs: 0,
        async handle(event, { tx }) {
          if (terminateOnce) {
            terminateOnce = false;
            const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(tx);
            await admin.query('select pg_terminate_backend($1)', [rows[0].pid]);
            // The backend dies while this transaction's client has no query running: pg reports
            // that as an 'error' event on the checked-out client. Wait until the server says so.
            for (;;) {
              const gone = await admin.query('select 1 from pg_stat_activity where pid = $1', [rows[0].pid]);
              if (gone.rowCount === 0) break;
            }
          }
          applied.push(event.id);
        },
      });
    });
    afterAll(async () => {
      await inbox.close();
      await t.close();
    });
    const deliver = (id: string) =>
      inbox.receive({ headers: { 'idempotency-key': id }, rawBody: Buffer.from('x') });

    it('answers 503 without crashing the process, and the retry applies the event once', async () => {
      const first = await deliver('e1');
      expect(first.status).toBe(503);
      const retry = await deliver('e1');
      expect(retry.kind).toBe('processed');
      expect(await inbox.event('e1')).toMatchObject({ status: 'processed' });
      expect((await deliver('e1')).kind).toBe('duplicate');
      expect(applied).toEqual(['e1', 'e1']); // the first run's writes rolled back with its backend
    });
  },
);
