/**
 * `inbox.close()` is one shutdown, however many callers ask for it (a SIGTERM handler, a
 * framework's onClose hook, a test's afterAll): every call resolves when the shutdown is
 * complete. After it, the inbox refuses to hand out its database: `ready()`, `kysely()` and the
 * methods built on them reject naming the cause, instead of returning a destroyed connection.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createInbox, InboxError } from '../src/index.js';
import { freshPGlite } from './support/databases.js';

type PGliteDb = Awaited<ReturnType<typeof freshPGlite>>;
let db: PGliteDb | undefined;
afterEach(async () => {
  if (db && !db.closed) await db.close();
  db = undefined;
});

describe('inbox.close()', () => {
  it('a second close() resolves only when the first has finished: the delivery in flight is answered', async () => {
    db = await freshPGlite();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered!: () => void;
    const running = new Promise<void>((resolve) => {
      entered = resolve;
    });
    const inbox = createInbox({
      db,
      sweepIntervalMs: 0,
      logger: false,
      handle: async () => {
        entered();
        await gate;
        return { ok: true };
      },
    });
    await inbox.ready();
    let answered: number | undefined;
    const delivery = inbox
      .receive({ headers: { 'idempotency-key': 'evt-in-flight' }, rawBody: Buffer.from('{}') })
      .then((outcome) => {
        answered = outcome.status;
      });
    await running;

    const first = inbox.close();
    const second = inbox.close();
    // The handler finishes a little later: a close that did not wait resolves before it.
    setTimeout(release, 200);
    await second;
    expect(answered).toBe(200);
    await first;
    await delivery;
    const { rows } = await db.query<{ status: string }>(
      `select status from ${inbox.tables.events} where id = 'evt-in-flight'`,
    );
    expect(rows).toEqual([{ status: 'processed' }]);
  });

  it('after close(), ready(), kysely() and migrate() reject: the inbox is closed', async () => {
    db = await freshPGlite();
    const inbox = createInbox({ db, sweepIntervalMs: 0, logger: false, handle: () => {} });
    await inbox.ready();
    await inbox.close();
    for (const call of [() => inbox.ready(), () => inbox.kysely(), () => inbox.migrate()]) {
      const err = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(InboxError);
      expect(err).toMatchObject({ code: 'closed', message: expect.stringMatching(/the inbox is closed/) });
    }
    // What it reports to an operator says so too, rather than a destroyed driver's message.
    expect(await inbox.health()).toMatchObject({
      ok: false,
      error: expect.stringMatching(/the inbox is closed/),
    });
  });
});
