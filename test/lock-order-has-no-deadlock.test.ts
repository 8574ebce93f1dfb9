/**
 * Every function locks the key row before the event row (ARCHITECTURE.md, "Locks"). `fail`
 * used to update the event first and the key after, while a sender's retry of the same ordered
 * event held the key in its claim and waited for the event: Postgres aborted one of them
 * (40P01), so the retry got 409 or the failed attempt went uncounted. This races a poison
 * event's failure recording against retries of it, many times, from two pools.
 */
import { describe, expect, it } from 'vitest';
import { createInbox } from '../src/index.js';
import { postgresTarget } from './support/databases.js';

describe.runIf(postgresTarget)('lock order (real Postgres)', () => {
  it('failure recording races retries of the same ordered event with no deadlock', async () => {
    const t = await postgresTarget!.open();
    const errors: string[] = [];
    const logger = {
      debug: () => {},
      info: () => {},
      warn: () => {},
      // Every round dead-letters its event (said at error): only other errors count here.
      error: (_obj: object, msg?: string) => {
        if (!msg?.startsWith('webhook-inbox: dead-lettered')) errors.push(msg ?? '');
      },
    };
    const options = {
      schema: t.schema,
      sweepIntervalMs: 0,
      // The second failure dead-letters the event and moves the key past it (`fail` then
      // writes the key row): the step that deadlocked.
      maxAttempts: 2,
      onPoison: 'skip' as const,
      lockTimeoutMs: 30_000,
      logger,
      handle: () => {
        throw new Error('poison');
      },
    };
    const a = createInbox({ ...options, db: t.db });
    const b = createInbox({ ...options, db: t.another() });
    try {
      await Promise.all([a.ready(), b.ready()]);
      const rounds = 40;
      const statuses: number[] = [];
      for (let seq = 1; seq <= rounds; seq++) {
        const delivery = {
          headers: { 'idempotency-key': `poison-${seq}`, 'x-key': 'k', 'x-seq': String(seq) },
          rawBody: Buffer.from('{}'),
        };
        // Four copies of the key's next event at once, from two instances: the first fails, the
        // second fails and dead-letters it, the others find it dead.
        const outcomes = await Promise.all([a, b, a, b].map((inbox) => inbox.receive(delivery)));
        statuses.push(...outcomes.map((o) => o.status).sort());
        expect(await a.event(`poison-${seq}`)).toMatchObject({ status: 'dead', attempts: 2 });
      }
      // None was refused as contended (a deadlock's 409), no failure went unrecorded.
      expect(statuses.filter((s) => s !== 200 && s !== 500)).toEqual([]);
      expect(errors).toEqual([]);
      expect((await a.keyState('k'))?.nextSeq).toBe(rounds + 1);
    } finally {
      await Promise.all([a.close(), b.close()]);
      await t.close();
    }
  });
});
