/**
 * The turn's try (src/sql/try-claim.ts, `createTryTurn`): an ordered delivery whose seq this
 * instance expects next is claimed by plain statements, not the claim function, and must decide
 * exactly as the claim would. Each case makes the try the path taken (the instance applied the
 * seq before, and the statements sent say so), then puts in its way what the claim checks in a
 * turn: another id waiting at the seq, a failed run, a rejected event with onPoison 'skip', many
 * copies at once. What a user sees is checked: outcomes, the ledger, the key's cursor, and the
 * inbox's invariants after each case.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type InboxEvent, RejectEvent } from '../src/index.js';
import { CountingPool } from './support/counting-pool.js';
import { postgresTarget, postgresUrl, type TargetDb, targets } from './support/databases.js';
import { invariantsHoldAfterEach } from './support/invariants.js';
import { type LedgerInbox, ledgerInbox, ordered } from './support/ordering.js';

const SETUP = 180_000;

invariantsHoldAfterEach();

let n = 0;
/** A key no other case uses (the cases share their schemas). */
const newKey = (label: string) => `${label}-${++n}`;

/** A handler wrapper that throws for the events `failing` names (while it does). */
function failWhen(failing: (event: InboxEvent) => Error | undefined) {
  return (handle: LedgerInbox['ledger']['handle']) => async (event: InboxEvent<any>, ctx: any) => {
    const err = failing(event);
    if (err) throw err;
    return handle(event, ctx);
  };
}

describe.runIf(postgresTarget)("the turn's try on real Postgres", () => {
  let t: TargetDb;
  let pool: CountingPool;
  /** Ids whose handler throws, and what. */
  const failing = new Map<string, Error>();
  let app: LedgerInbox;
  beforeAll(async () => {
    t = await postgresTarget!.open();
    pool = new CountingPool(postgresUrl!);
    app = await ledgerInbox(
      t,
      // Duplicates go to PostgreSQL: the in-process cache would answer some copies first.
      { db: pool, duplicateCacheSize: 0, onPoison: 'skip' },
      failWhen((e) => failing.get(e.id)),
    );
  }, SETUP);
  afterAll(async () => {
    await app?.inbox.close();
    await pool?.end();
    await t?.close();
  });

  /** The first round trip of the delivery `run` sends took the turn's try. */
  async function throughTheTry<T>(run: () => Promise<T>): Promise<T> {
    pool.reset();
    const result = await run();
    expect(pool.reset()[0]).toMatch(/^begin .*; execute "wi_fold:[^"]+\.try_turn_lock"/);
    return result;
  }

  it('another id waiting at the expected seq (a failed run of it): refused as seq-taken, never applied beside it', async () => {
    const key = newKey('taken');
    expect((await app.send(ordered(key, 1)))[0].kind).toBe('processed');
    failing.set(`${key}:2`, new Error('down for now'));
    expect((await throughTheTry(() => app.send(ordered(key, 2))))[0].status).toBe(500);
    // Another sender's id at seq 2, while the failed one waits there to be retried.
    const other = ordered(key, 2, 200, `${key}:2-other`);
    const [refused] = await throughTheTry(() => app.send(other));
    expect(refused).toMatchObject({
      status: 422,
      body: { field: 'x-seq', detail: expect.stringMatching(/already held for another/) },
    });
    expect(await app.inbox.event(`${key}:2-other`)).toBeUndefined();
    failing.delete(`${key}:2`);
    expect((await app.send(ordered(key, 2)))[0].kind).toBe('processed');
    expect(await app.seqs(key)).toEqual([1, 2]);
    expect(await app.balance(key)).toBe(3);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 3, state: 'open' });
  });

  it('a run that fails: its cursor stays at its seq, what comes after waits, and its retry applies both in order', async () => {
    const key = newKey('failed');
    expect((await app.send(ordered(key, 1)))[0].kind).toBe('processed');
    failing.set(`${key}:2`, new Error('down for now'));
    expect((await throughTheTry(() => app.send(ordered(key, 2))))[0].status).toBe(500);
    expect(await app.inbox.event(`${key}:2`)).toMatchObject({ status: 'pending', attempts: 1 });
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 2 });
    expect((await app.send(ordered(key, 3)))[0].kind).toBe('held');
    failing.delete(`${key}:2`);
    expect((await app.send(ordered(key, 2)))[0].kind).toBe('processed');
    await app.inbox.idle();
    expect(await app.seqs(key)).toEqual([1, 2, 3]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 4, state: 'open' });
  });

  it("a rejected event with onPoison 'skip': dead-lettered, the cursor past it, the held seq behind it applied", async () => {
    const key = newKey('rejected');
    expect((await app.send(ordered(key, 1)))[0].kind).toBe('processed');
    expect((await app.send(ordered(key, 3)))[0].kind).toBe('held');
    failing.set(`${key}:2`, new RejectEvent('not for us'));
    const [rejected] = await throughTheTry(() => app.send(ordered(key, 2)));
    expect(rejected.kind).toBe('rejected');
    await app.inbox.idle();
    expect(await app.inbox.event(`${key}:2`)).toMatchObject({ status: 'dead', deadReason: 'rejected' });
    expect(await app.seqs(key)).toEqual([1, 3]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 4, state: 'open' });
  });

  it('copies of the expected seq at once, and other ids at it: one applied, once', async () => {
    const key = newKey('race');
    expect((await app.send(ordered(key, 1)))[0].kind).toBe('processed');
    pool.reset();
    const outcomes = await Promise.all([
      ...Array.from({ length: 8 }, () => app.inbox.receive(ordered(key, 2))),
      ...Array.from({ length: 4 }, (_, i) => app.inbox.receive(ordered(key, 2, 100, `${key}:2-${i}`))),
    ]);
    // Several took the try: one holds the key row, the others skipped it and went to the claim.
    expect(pool.reset().filter((s) => s.includes('try_turn_lock')).length).toBeGreaterThan(1);
    const processed = outcomes.filter((o) => o.kind === 'processed');
    expect(processed).toHaveLength(1);
    // Every other copy is a duplicate, in flight (409, retried by its sender) or refused.
    for (const o of outcomes) expect([200, 409, 422]).toContain(o.status);
    expect(await app.seqs(key)).toEqual([1, 2]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 3, state: 'open' });
  });
});

describe.each(targets)("the turn's try decides as the claim on $name", (target) => {
  let t: TargetDb;
  let app: LedgerInbox;
  const failing = new Map<string, Error>();
  beforeAll(async () => {
    t = await target.open();
    app = await ledgerInbox(
      t,
      { duplicateCacheSize: 0 },
      failWhen((e) => failing.get(e.id)),
    );
  }, SETUP);
  afterAll(async () => {
    await app?.inbox.close();
    await t?.close();
  });

  it('a copy of the expected seq another instance applied: answered from its row as the claim would, the ledger once', async () => {
    const key = newKey('row');
    expect((await app.send(ordered(key, 1)))[0].kind).toBe('processed');
    // Another instance (it never saw the key: it claims through the claim function) applies 2.
    const other = createInbox({
      db: t.another(),
      schema: t.schema,
      sweepIntervalMs: 0,
      duplicateCacheSize: 0,
      handle: app.ledger.handle,
    });
    const applied = await other.receive(ordered(key, 2));
    expect(applied.kind).toBe('processed');
    await other.close();
    // This one still expects 2: the try reads the id's row and answers from it.
    const [copy, changed] = await app.send(ordered(key, 2), ordered(key, 2, 20));
    expect(copy).toMatchObject({
      status: 200,
      kind: 'duplicate',
      body: { result: (applied.body as any).result },
    });
    expect(changed).toMatchObject({ status: 422, body: { field: 'body' } });
    expect((await app.send(ordered(key, 3)))[0].kind).toBe('processed');
    // An id reused at the next seq: its row is at 2.
    expect((await app.send(ordered(key, 4, 2, `${key}:2`)))[0]).toMatchObject({
      status: 422,
      body: { field: 'x-seq', detail: expect.stringMatching(/first used with a different/) },
    });
    expect(await app.seqs(key)).toEqual([1, 2, 3]);
    expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 4, state: 'open' });
  });

  it('another id waiting at the expected seq: refused as seq-taken, the waiting one applied at its retry', async () => {
    const key = newKey('taken');
    expect((await app.send(ordered(key, 1)))[0].kind).toBe('processed');
    failing.set(`${key}:2`, new Error('down for now'));
    expect((await app.send(ordered(key, 2)))[0].status).toBe(500);
    const [refused] = await app.send(ordered(key, 2, 200, `${key}:2-other`));
    expect(refused).toMatchObject({
      status: 422,
      body: { field: 'x-seq', detail: expect.stringMatching(/already held for another/) },
    });
    failing.delete(`${key}:2`);
    expect((await app.send(ordered(key, 2)))[0].kind).toBe('processed');
    expect(await app.seqs(key)).toEqual([1, 2]);
    expect(await app.balance(key)).toBe(3);
  });
});
