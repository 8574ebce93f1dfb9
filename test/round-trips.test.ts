import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { CountingPool } from './support/counting-pool.js';
import { postgresTarget, postgresUrl, type TargetDb } from './support/databases.js';

// The hot path's round trips are a promise (see the comment at the top of src/receive/pipeline.ts);
// this pins them, so a change that adds one has to change this test and say why.
describe.runIf(postgresTarget)('round trips to Postgres per delivery', () => {
  let t: TargetDb;
  let pool: CountingPool;
  let inbox: Inbox;
  let returnResult = true;
  beforeAll(async () => {
    t = await postgresTarget!.open();
    pool = new CountingPool(postgresUrl!);
    inbox = createInbox({
      db: pool,
      schema: t.schema,
      sweepIntervalMs: 0,
      handle: async (_e, { tx }) => {
        await tx.selectNoFrom((eb) => eb.lit(1).as('one')).execute(); // the handler's own statement
        return returnResult ? { ok: true } : undefined;
      },
    });
    await inbox.ready();
  });
  afterAll(async () => {
    await inbox.close();
    await pool.end();
    await t.close();
  });
  const deliver = (id: string, extra: Record<string, string> = {}) =>
    inbox.receive({
      headers: { 'idempotency-key': id, 'content-type': 'application/json', ...extra },
      rawBody: Buffer.from('{}'),
    });

  it('a new event: BEGIN, claim, the handler, store result, COMMIT', async () => {
    pool.reset();
    expect((await deliver('rt-1')).kind).toBe('processed');
    const sent = pool.reset();
    expect(sent).toHaveLength(5);
    expect(sent[0]).toBe('begin');
    expect(sent[1]).toMatch(/claim/);
    expect(sent[3]).toMatch(/^update/);
    expect(sent[4]).toBe('commit');
  });

  it('a new event whose handler returns nothing: one fewer', async () => {
    returnResult = false;
    pool.reset();
    expect((await deliver('rt-2')).kind).toBe('processed');
    expect(pool.reset()).toHaveLength(4);
    returnResult = true;
  });

  it('a duplicate of an event this instance processed: none (the in-process LRU)', async () => {
    pool.reset();
    const outcome = await deliver('rt-1');
    expect(outcome).toMatchObject({ kind: 'duplicate', body: { result: { ok: true } } });
    expect(outcome.headers['idempotent-replayed']).toBe('true');
    expect(pool.reset()).toEqual([]);
  });

  it('a duplicate another instance processed: BEGIN, claim, COMMIT', async () => {
    const other = createInbox({ db: pool, schema: t.schema, sweepIntervalMs: 0, handle: () => {} });
    await other.ready();
    pool.reset();
    const outcome = await other.receive({
      headers: { 'idempotency-key': 'rt-1', 'content-type': 'application/json' },
      rawBody: Buffer.from('{}'),
    });
    expect(outcome).toMatchObject({ kind: 'duplicate', body: { result: { ok: true } } });
    expect(pool.reset()).toEqual(['begin', expect.stringMatching(/claim/), 'commit']);
    await other.close();
  });

  it('the LRU never hides a mismatch: a different body goes to Postgres and is 422', async () => {
    pool.reset();
    const outcome = await inbox.receive({
      headers: { 'idempotency-key': 'rt-1', 'content-type': 'application/json' },
      rawBody: Buffer.from('{"other": true}'),
    });
    expect(outcome.status).toBe(422);
    expect(pool.reset()).toHaveLength(3);
  });

  it('an ordered event in its turn costs what an unordered one does', async () => {
    pool.reset();
    expect((await deliver('rt-o1', { 'x-key': 'k', 'x-seq': '1' })).kind).toBe('processed');
    expect(pool.reset()).toHaveLength(5);
  });

  it('a held event: BEGIN, claim, COMMIT', async () => {
    pool.reset();
    expect((await deliver('rt-o3', { 'x-key': 'k', 'x-seq': '3' })).kind).toBe('held');
    expect(pool.reset()).toHaveLength(3);
  });
});
