/**
 * A new event applied inline has no row until COMMIT: for an unordered id the claim takes an
 * advisory lock on it, for an ordered one in its turn the key row's lock (taken anyway) holds
 * it, and the row is inserted once, with the handler's result (and key and seq), riding on
 * COMMIT (src/db/sql/claim.ts, src/db/sql/record-applied.ts). What a sender and an operator see must be
 * exactly what they saw when the claim inserted the row: applied once under concurrent
 * copies, failures counted, poison and rejected dead letters, the payload kept with
 * `keepPayload`. And where a row appears anyway (a claim that does not take the lock), the
 * primary key refuses the second application and the delivery is answered 409, never 500.
 */
import { createHash } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { createInbox, type Handler } from '../src/index.js';
import { postgresTarget, postgresUrl, type Target, type TargetDb, targets } from './support/databases.js';
import { post, type Reply } from './support/http.js';
import { invariantsHoldAfterEach, watchInvariants } from './support/invariants.js';

const problemJson = /^application\/problem\+json/;
let n = 0;
const uid = (label: string) => `${label}-${process.pid}-${++n}`;

/**
 * Resolves once `n` sessions wait for an id's advisory lock (src/db/sql/id-lock.ts), or for any
 * lock (`'any'`), in a statement on `schema` (other tests share the server): a lock wait is
 * no event a client can await.
 */
async function waitingForIdLock(
  db: Kysely<any>,
  schema: string,
  n: number,
  lock = 'advisory',
): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
      where wait_event_type = 'Lock' and (wait_event = ${lock} or ${lock} = 'any') and pid <> pg_backend_pid()
        and position(${schema} in query) > 0`.execute(db);
    if ((rows[0]?.n ?? 0) >= n) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`${n} claims never waited for an id's lock`);
}

/**
 * Holds the first handler run of one id (delivered under `key`, or none) until released;
 * `entered` resolves when it runs.
 */
interface Gate {
  readonly id: string;
  readonly entered: Promise<void>;
  release(): void;
}
let gate: { id: string; key: string | null; entered(): void; released: Promise<void> } | undefined;
function hold(id: string, key: string | null = null): Gate {
  let entered!: () => void;
  let release!: () => void;
  const enteredP = new Promise<void>((resolve) => {
    entered = resolve;
  });
  gate = { id, key, entered, released: new Promise<void>((resolve) => (release = resolve)) };
  return { id, entered: enteredP, release };
}

/** The ledger's handler behind the gate (of the gate's key, or none), recording each run's attempt. */
const attemptsSeen = new Map<string, number[]>();
/** Each run's `event.receivedAt`, in ms. */
const receivedSeen = new Map<string, number[]>();
const gated = (handle: Handler) =>
  (async (event, ctx) => {
    attemptsSeen.set(event.id, [...(attemptsSeen.get(event.id) ?? []), event.attempt]);
    receivedSeen.set(event.id, [...(receivedSeen.get(event.id) ?? []), event.receivedAt.getTime()]);
    if (gate && event.id === gate.id && event.key === gate.key) {
      // Only the first run waits: a copy that reached the handler (no lock) would run on.
      const g = gate;
      gate = undefined;
      g.entered();
      await g.released;
    }
    return handle(event, ctx);
  }) as Handler;

async function startOn(t: TargetDb, db: TargetDb['db'], inbox: Record<string, unknown> = {}) {
  return startLedger({
    ledgerSchema: t.appSchema,
    ingest: false,
    wrapHandler: gated,
    inbox: { db, schema: t.schema, sweepIntervalMs: 0, maxAttempts: 2, ...inbox },
  });
}

describe.each(targets)('a new unordered event, its row written at COMMIT, on $name', (target: Target) => {
  let t: TargetDb;
  let app: LedgerServer;
  let url: string;
  beforeAll(async () => {
    t = await target.open();
    app = await startOn(t, t.db);
    url = `${app.url}/webhooks`;
  });
  afterAll(async () => {
    await app?.close();
    await t?.close();
  });

  const entriesOf = async (id: string) =>
    (await app.ledger.account(await app.inbox.kysely(), 'none')).entries.filter((e) => e.id === id);

  it('20 concurrent copies of one new id: applied once; the others duplicate with its result, or 409', async () => {
    const id = uid('storm');
    const replies = await Promise.all(
      Array.from({ length: 20 }, () => post(url, { amount: 3 }, { 'Idempotency-Key': id })),
    );
    const processed = replies.filter((r) => r.status === 200 && r.body.status === 'processed');
    expect(processed).toHaveLength(1);
    const result = processed[0]!.body.result;
    for (const r of replies) {
      if (r === processed[0]) continue;
      if (r.status === 409) {
        expect(r.headers.get('content-type')).toMatch(problemJson);
        continue;
      }
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ status: 'duplicate', id, result });
    }
    expect(await entriesOf(id)).toEqual([{ id, seq: null, amount: 3 }]);
    expect(await app.inbox.event(id)).toMatchObject({ status: 'processed', attempts: 0, result });
  });

  it('a handler that throws: 500, the attempt counted; the redelivery applies it once', async () => {
    const id = uid('flaky');
    app.ledger.failNext.set('none', 1);
    const first = await post(url, { amount: 4 }, { 'Idempotency-Key': id });
    expect(first.status).toBe(500);
    expect(first.headers.get('content-type')).toMatch(problemJson);
    expect(await entriesOf(id)).toEqual([]);
    const waiting = await app.inbox.event(id);
    expect(waiting).toMatchObject({ status: 'pending', attempts: 1, processedAt: null, result: null });
    expect(waiting?.lastError).toMatch(/failing on purpose/);
    // Kept for a retry without the sender (what the claim's row plus the revert used to keep).
    expect(waiting?.payload?.toString()).toBe('{"amount":4}');

    const again = await post(url, { amount: 4 }, { 'Idempotency-Key': id });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ status: 'processed', id });
    expect(attemptsSeen.get(id)).toEqual([1, 2]);
    expect(await entriesOf(id)).toEqual([{ id, seq: null, amount: 4 }]);
    expect(await app.inbox.event(id)).toMatchObject({
      status: 'processed',
      attempts: 1,
      result: again.body.result,
    });
    // And a third copy is a duplicate with that result.
    const third = await post(url, { amount: 4 }, { 'Idempotency-Key': id });
    expect(third.body).toEqual({ status: 'duplicate', id, result: again.body.result });
  });

  it("the handler's event.receivedAt is the row's received_at, on the first run and on the retry", async () => {
    const id = uid('received');
    app.ledger.failNext.set('none', 1);
    expect((await post(url, { amount: 2 }, { 'Idempotency-Key': id })).status).toBe(500);
    const stored = (await app.inbox.event(id))?.receivedAt.getTime();
    expect((await post(url, { amount: 2 }, { 'Idempotency-Key': id })).status).toBe(200);
    // Both runs saw when the first copy arrived, to the millisecond, as the row keeps it.
    expect(receivedSeen.get(id)).toEqual([stored, stored]);
    expect((await app.inbox.event(id))?.receivedAt.getTime()).toBe(stored);
    const fresh = uid('received-once');
    expect((await post(url, { amount: 2 }, { 'Idempotency-Key': fresh })).status).toBe(200);
    expect(receivedSeen.get(fresh)).toEqual([(await app.inbox.event(fresh))?.receivedAt.getTime()]);
  });

  it('failing maxAttempts times: dead-lettered as poison, never applied, and so answered again', async () => {
    const id = uid('poison');
    app.ledger.failNext.set('none', 2);
    expect((await post(url, { amount: 5 }, { 'Idempotency-Key': id })).status).toBe(500);
    const second = await post(url, { amount: 5 }, { 'Idempotency-Key': id });
    expect(second.status).toBe(200);
    expect(second.body).toEqual({ status: 'dead-lettered', id, reason: 'poison' });
    expect(await app.inbox.event(id)).toMatchObject({ status: 'dead', deadReason: 'poison', attempts: 2 });
    const third = await post(url, { amount: 5 }, { 'Idempotency-Key': id });
    expect(third.body).toEqual({ status: 'dead-lettered', id, reason: 'poison' });
    expect(await entriesOf(id)).toEqual([]);
  });

  it('a rejected event (RejectEvent): 422 at once, dead-lettered after one attempt, 422 again', async () => {
    const id = uid('rejected');
    const first = await post(url, { amount: 'ten' }, { 'Idempotency-Key': id });
    expect(first.status).toBe(422);
    expect(first.headers.get('content-type')).toMatch(problemJson);
    expect(await app.inbox.event(id)).toMatchObject({ status: 'dead', deadReason: 'rejected', attempts: 1 });
    expect((await post(url, { amount: 'ten' }, { 'Idempotency-Key': id })).status).toBe(422);
    expect(attemptsSeen.get(id)).toEqual([1]);
  });

  it('keepPayload keeps the payload and headers on the row written at COMMIT; without it, none', async () => {
    const kept = createInbox({
      db: t.another(),
      schema: t.schema,
      source: 'kept',
      keepPayload: true,
      sweepIntervalMs: 0,
      handle: () => undefined, // no result: the row is written all the same
    });
    try {
      const id = uid('kept');
      const delivery = {
        headers: { 'idempotency-key': id, 'content-type': 'application/json', 'x-trace': 'abc' },
        rawBody: Buffer.from('{"amount":6}'),
      };
      expect((await kept.receive(delivery)).kind).toBe('processed');
      const row = await kept.event(id);
      expect(row).toMatchObject({ status: 'processed', attempts: 0, result: null });
      expect(row?.processedAt).toBeInstanceOf(Date);
      expect(row?.payload?.toString()).toBe('{"amount":6}');
      expect(row?.headers).toMatchObject({ 'x-trace': 'abc', 'content-type': 'application/json' });
      expect(await kept.receive(delivery)).toMatchObject({ kind: 'duplicate', body: { result: null } });
    } finally {
      await kept.close();
    }
    const id = uid('plain');
    expect((await post(url, { amount: 6 }, { 'Idempotency-Key': id })).status).toBe(200);
    expect(await app.inbox.event(id)).toMatchObject({ status: 'processed', payload: null, headers: null });
  });
});

describe.runIf(postgresTarget)(
  'the advisory lock and the primary key (real PostgreSQL, concurrent HTTP)',
  () => {
    let t: TargetDb;
    let app: LedgerServer;
    let url: string;
    const registry = new Registry();
    beforeAll(async () => {
      t = await postgresTarget!.open();
      app = await startOn(t, t.db, { lockTimeoutMs: 60_000, metrics: { registry } });
      url = `${app.url}/webhooks`;
    });
    /** The handler runs counted with this outcome, as the metrics text says. */
    const handlerRuns = async (outcome: 'processed' | 'failed') => {
      const line = new RegExp(
        `^webhook_inbox_handler_duration_seconds_count\\{source="default",outcome="${outcome}"\\} (\\d+)$`,
        'm',
      );
      return Number(line.exec(await registry.metrics())?.[1] ?? 0);
    };
    afterAll(async () => {
      await app?.close();
      await t?.close();
    });

    /** A second instance on the same tables and ledger, with its own options. */
    async function second(inbox: Record<string, unknown>): Promise<LedgerServer> {
      return startOn(t, t.another(), inbox);
    }
    const entries = async (key: string, id: string) =>
      (await app.ledger.account(await app.inbox.kysely(), key)).entries.filter((e) => e.id === id);

    it("onInFlight 'reject': a copy of a new event still in its handler is 409 at once; a different id is not held", async () => {
      const id = uid('slow');
      const g = hold(id);
      const first = post(url, { amount: 1 }, { 'Idempotency-Key': id });
      await g.entered;
      const other = await second({ onInFlight: 'reject', lockTimeoutMs: 60_000 });
      let copy: Reply;
      let unrelated: Reply;
      try {
        copy = await post(`${other.url}/webhooks`, { amount: 1 }, { 'Idempotency-Key': id });
        unrelated = await post(`${other.url}/webhooks`, { amount: 1 }, { 'Idempotency-Key': uid('free') });
      } finally {
        g.release();
        await other.close();
      }
      expect(copy.status).toBe(409);
      expect(copy.headers.get('content-type')).toMatch(problemJson);
      expect(copy.headers.get('retry-after')).toBe('1');
      expect(unrelated.status).toBe(200);
      expect((await first).body).toMatchObject({ status: 'processed', id });
      expect(await entries('none', id)).toHaveLength(1);
      expect((await post(url, { amount: 1 }, { 'Idempotency-Key': id })).body.status).toBe('duplicate');
    });

    it("onInFlight 'wait': a copy waits for the lock at most lockTimeoutMs, then 409", async () => {
      const id = uid('waits');
      const g = hold(id);
      const first = post(url, { amount: 2 }, { 'Idempotency-Key': id });
      await g.entered;
      const other = await second({ lockTimeoutMs: 50 });
      let copy: Reply;
      try {
        copy = await post(`${other.url}/webhooks`, { amount: 2 }, { 'Idempotency-Key': id });
      } finally {
        g.release();
        await other.close();
      }
      expect(copy.status).toBe(409);
      expect(copy.headers.get('content-type')).toMatch(problemJson);
      expect((await first).body).toMatchObject({ status: 'processed', id });
      expect(await entries('none', id)).toHaveLength(1);
    });

    it("an ordered copy of an unordered id in its handler waits for the id's lock, then is 422: one handler run", async () => {
      const id = uid('raced');
      const g = hold(id);
      // The unordered copy claims (no row yet) and waits in its handler.
      const unordered = post(url, { amount: 7 }, { 'Idempotency-Key': id });
      await g.entered;
      // An ordered copy of the same id takes its key row, then waits for the id's lock: its
      // handler must not run beside the first one's (an external side effect would happen twice).
      const ordered = post(url, { amount: 7 }, { 'Idempotency-Key': id, 'X-Key': 'raced', 'X-Seq': '1' });
      try {
        await waitingForIdLock(await app.inbox.kysely(), t.schema, 1);
      } finally {
        g.release();
      }
      expect((await unordered).body).toMatchObject({ status: 'processed', id });
      // It read the committed row: the id was first used without a key.
      const reply = await ordered;
      expect(reply.status).toBe(422);
      expect(reply.body).toMatchObject({ field: 'x-key' });
      expect(attemptsSeen.get(id)).toEqual([1]);
      expect(await entries('none', id)).toEqual([{ id, seq: null, amount: 7 }]);
      expect(await entries('raced', id)).toEqual([]);
      expect(await app.inbox.event(id)).toMatchObject({ status: 'processed', key: null, seq: null });
      expect(await app.inbox.keyState('raced')).toBeUndefined();
    });

    it("an inline and a deferred instance on one schema: the deferred claim waits for the id's lock, then is a duplicate: one handler run", async () => {
      const id = uid('mixed');
      const g = hold(id);
      const inline = post(url, { amount: 3 }, { 'Idempotency-Key': id });
      await g.entered;
      // A deferred instance beside it (a mixed deployment, or a switch of modes): had its claim
      // stored the id as pending, one of its workers would run the handler a second time.
      const deferred = await second({
        mode: 'deferred',
        workers: 1,
        pollIntervalMs: 20,
        lockTimeoutMs: 60_000,
      });
      let copy: Reply;
      try {
        const pending = post(`${deferred.url}/webhooks`, { amount: 3 }, { 'Idempotency-Key': id });
        try {
          await waitingForIdLock(await app.inbox.kysely(), t.schema, 1);
        } finally {
          g.release();
        }
        copy = await pending;
        await deferred.inbox.idle();
      } finally {
        await deferred.close();
      }
      expect((await inline).body).toMatchObject({ status: 'processed', id });
      expect(copy.body).toMatchObject({ status: 'duplicate', id });
      expect(attemptsSeen.get(id)).toEqual([1]);
      expect(await entries('none', id)).toHaveLength(1);
      expect(await app.inbox.event(id)).toMatchObject({ status: 'processed', key: null });
    });

    it('a deferred instance stored the id and its worker runs it: an inline copy waits for the row, then is a duplicate: one handler run', async () => {
      const id = uid('mixed-worker');
      const g = hold(id);
      const deferred = await second({
        mode: 'deferred',
        workers: 1,
        pollIntervalMs: 20,
        lockTimeoutMs: 60_000,
      });
      let copy: Reply;
      try {
        expect(
          (await post(`${deferred.url}/webhooks`, { amount: 4 }, { 'Idempotency-Key': id })).status,
        ).toBe(202);
        // Its worker took the pending row and holds it in the handler.
        await g.entered;
        const pending = post(url, { amount: 4 }, { 'Idempotency-Key': id });
        try {
          await waitingForIdLock(await app.inbox.kysely(), t.schema, 1, 'any');
        } finally {
          g.release();
        }
        copy = await pending;
        await deferred.inbox.idle();
      } finally {
        await deferred.close();
      }
      expect(copy.body).toMatchObject({ status: 'duplicate', id });
      expect(attemptsSeen.get(id)).toEqual([1]);
      expect(await entries('none', id)).toHaveLength(1);
      expect(await app.inbox.event(id)).toMatchObject({ status: 'processed', key: null });
    });

    it("holding the id's lock, a claim never waits for an ordered row a deferred worker applies (that worker waits for the key): 422 at once", async () => {
      const key = uid('worker-key');
      const id = `${key}-1`;
      const g = hold(id, key);
      const deferred = await second({
        mode: 'deferred',
        workers: 1,
        pollIntervalMs: 20,
        lockTimeoutMs: 60_000,
      });
      try {
        const stored = await post(
          `${deferred.url}/webhooks`,
          { amount: 5 },
          { 'Idempotency-Key': id, 'X-Key': key, 'X-Seq': '1' },
        );
        expect(stored.status).toBe(202);
        // Its worker holds the event row (take_turn) in the handler, and will wait for the key in
        // advance. An unordered copy holding the id's lock must not wait for that row: an ordered
        // copy holding the key would wait for the id's lock, closing a cycle.
        await g.entered;
        const unordered = await post(url, { amount: 5 }, { 'Idempotency-Key': id });
        expect(unordered.status).toBe(422);
        expect(unordered.body).toMatchObject({ field: 'x-key' });
        const ordered = await post(url, { amount: 5 }, { 'Idempotency-Key': id, 'X-Key': key, 'X-Seq': '1' });
        expect(ordered.status).toBe(202);
      } finally {
        g.release();
      }
      await deferred.inbox.idle();
      await deferred.close();
      expect(attemptsSeen.get(id)).toEqual([1]);
      expect(await entries(key, id)).toEqual([{ id, seq: 1, amount: 5 }]);
      expect(await app.inbox.event(id)).toMatchObject({ status: 'processed', key, seq: 1 });
    });

    /**
     * Holds the id's advisory lock from a session of its own, as a claim of the id in flight
     * would: the key is the one every claim takes (src/db/sql/id-lock.ts), pinned here because
     * instances of two versions must keep locking the same key during a rolling deploy.
     */
    async function holdIdLock(id: string): Promise<{ release(): Promise<void> }> {
      const holder = new pg.Client({ connectionString: postgresUrl! });
      await holder.connect();
      await holder.query('begin');
      await holder.query(
        `select pg_advisory_xact_lock(hashtextextended($1 || length($2::text) || '|' || $2 || '|' || $3, 0))`,
        [`${t.schema}.|`, 'default', id],
      );
      return {
        async release() {
          await holder.query('rollback');
          await holder.end();
        },
      };
    }

    it('a new id whose lock another claim holds is not applied by the try-claim: it waits for the lock, then applies once', async () => {
      const id = uid('try-busy');
      const lock = await holdIdLock(id);
      let reply: Promise<Reply>;
      try {
        reply = post(url, { amount: 4 }, { 'Idempotency-Key': id });
        // The claim (not the try-claim, which never waits) is what waits for the id's lock.
        await waitingForIdLock(await app.inbox.kysely(), t.schema, 1);
        expect(await entries('none', id)).toHaveLength(0);
      } finally {
        await lock.release();
      }
      expect((await reply).body).toMatchObject({ status: 'processed', id });
      expect(await entries('none', id)).toHaveLength(1);
    });

    it("a processed copy is a duplicate at once, even while another claim holds the id's lock: a committed row is final", async () => {
      const id = uid('try-dup');
      expect((await post(url, { amount: 5 }, { 'Idempotency-Key': id })).body.status).toBe('processed');
      const lock = await holdIdLock(id);
      // A second instance: nothing in its process remembers the id (lockTimeoutMs 60 s: a copy
      // that waited for the lock would outlast the test).
      const other = await second({ lockTimeoutMs: 60_000 });
      let copy: Reply;
      try {
        copy = await post(`${other.url}/webhooks`, { amount: 5 }, { 'Idempotency-Key': id });
      } finally {
        await other.close();
        await lock.release();
      }
      expect(copy.status).toBe(200);
      expect(copy.body).toMatchObject({ status: 'duplicate', id });
      expect(await entries('none', id)).toHaveLength(1);
    });

    it('while the lock is held, the id has no row; the COMMIT writes it with the result', async () => {
      const id = uid('unwritten');
      const g = hold(id);
      const first = post(url, { amount: 8 }, { 'Idempotency-Key': id });
      await g.entered;
      const db = await app.inbox.kysely();
      const rows = await sql<{
        n: number;
      }>`select count(*)::int as n from ${sql.table(`${t.schema}.events`)} where id = ${id}`.execute(db);
      expect(rows.rows[0]?.n).toBe(0);
      g.release();
      const reply = await first;
      expect(reply.body).toMatchObject({ status: 'processed', id });
      expect(await app.inbox.event(id)).toMatchObject({ status: 'processed', result: reply.body.result });
    });

    it("a row inserted meanwhile without the id's lock: COMMIT fails (23505), 409, the handler's writes rolled back; the retry is answered from that row", async () => {
      const id = uid('guarded');
      const body = { amount: 9 };
      const [processedBefore, failedBefore] = [await handlerRuns('processed'), await handlerRuns('failed')];
      const g = hold(id);
      const first = post(url, body, { 'Idempotency-Key': id });
      await g.entered;
      // Something that takes no id lock (a hand-written INSERT, a tool) stores the id, same
      // bytes, processed elsewhere, while the handler runs: only the primary key is left to
      // refuse the second application.
      const other = new pg.Client({ connectionString: postgresUrl! });
      await other.connect();
      try {
        await other.query(
          `insert into "${t.schema}".events (source, id, body_hash, status, processed_at, result, stream)
           values ('default', $1, $2, 'processed', now(), $3::jsonb, $1)`,
          [
            id,
            createHash('sha256').update(JSON.stringify(body)).digest('hex'),
            JSON.stringify({ appliedBy: 'elsewhere' }),
          ],
        );
      } finally {
        g.release();
        await other.end();
      }
      const reply = await first;
      expect(reply.status).toBe(409);
      expect(reply.headers.get('content-type')).toMatch(problemJson);
      expect(reply.body).toMatchObject({ status: 409 });
      // The handler returned, but its COMMIT failed: nothing was processed, and it did not throw.
      expect(await handlerRuns('processed')).toBe(processedBefore);
      expect(await handlerRuns('failed')).toBe(failedBefore);
      // The ledger entry the handler wrote rolled back with the failed COMMIT.
      expect(await entries('none', id)).toEqual([]);
      expect(await app.inbox.event(id)).toMatchObject({
        status: 'processed',
        result: { appliedBy: 'elsewhere' },
      });
      const retry = await post(url, body, { 'Idempotency-Key': id });
      expect(retry.status).toBe(200);
      expect(retry.body).toEqual({ status: 'duplicate', id, result: { appliedBy: 'elsewhere' } });
      expect(attemptsSeen.get(id)).toEqual([1]);
      expect(await entries('none', id)).toEqual([]);
      // A run that commits is counted.
      expect((await post(url, body, { 'Idempotency-Key': uid('counted') })).status).toBe(200);
      expect(await handlerRuns('processed')).toBe(processedBefore + 1);
    });
  },
);

describe.each(targets)(
  'a new ordered event in its turn, its row written at COMMIT, on $name',
  (target: Target) => {
    let t: TargetDb;
    let app: LedgerServer;
    let url: string;
    beforeAll(async () => {
      t = await target.open();
      app = await startOn(t, t.db);
      watchInvariants(app.inbox);
      url = `${app.url}/webhooks`;
    });
    afterAll(async () => {
      await app?.close();
      await t?.close();
    });
    invariantsHoldAfterEach();

    const send = (id: string, key: string, seq: number, amount: number) =>
      post(url, { amount }, { 'Idempotency-Key': id, 'X-Key': key, 'X-Seq': String(seq) });
    const entries = async (key: string) => (await app.ledger.account(await app.inbox.kysely(), key)).entries;

    it('applied with its key, seq and result; the cursor moved; a copy is a duplicate, another id at its seq 422', async () => {
      const key = uid('applied');
      const first = await send(`${key}-1`, key, 1, 3);
      expect(first.status).toBe(200);
      expect(first.body).toMatchObject({ status: 'processed', id: `${key}-1` });
      expect(await app.inbox.event(`${key}-1`)).toMatchObject({
        status: 'processed',
        key,
        seq: 1,
        attempts: 0,
        payload: null,
        result: first.body.result,
      });
      expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 2, state: 'open' });
      const copy = await send(`${key}-1`, key, 1, 3);
      expect(copy.body).toEqual({ status: 'duplicate', id: `${key}-1`, result: first.body.result });
      // The "seq-applied" check reads the row the COMMIT wrote.
      const other = await send(`${key}-other`, key, 1, 3);
      expect(other.status).toBe(422);
      expect(other.body).toMatchObject({ field: 'x-seq' });
      expect(await app.inbox.event(`${key}-other`)).toBeUndefined();
      expect(await entries(key)).toEqual([{ id: `${key}-1`, seq: 1, amount: 3 }]);
    });

    it('the claim still tells the caller to drain: a held next seq is applied after it, in order', async () => {
      const key = uid('drains');
      expect((await send(`${key}-2`, key, 2, 20)).body).toMatchObject({ status: 'held' });
      expect((await send(`${key}-1`, key, 1, 10)).body).toMatchObject({ status: 'processed' });
      await app.inbox.idle();
      expect(await entries(key)).toEqual([
        { id: `${key}-1`, seq: 1, amount: 10 },
        { id: `${key}-2`, seq: 2, amount: 20 },
      ]);
      expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 3, heldSeqs: [] });
      expect(await app.inbox.event(`${key}-1`)).toMatchObject({ status: 'processed', key, seq: 1 });
    });

    it('a handler that throws: 500, the attempt counted, the cursor back at its seq; the redelivery applies it, then what waited', async () => {
      const key = uid('flaky');
      app.ledger.failNext.set(key, 1);
      const first = await send(`${key}-1`, key, 1, 4);
      expect(first.status).toBe(500);
      expect(first.headers.get('content-type')).toMatch(problemJson);
      const waiting = await app.inbox.event(`${key}-1`);
      expect(waiting).toMatchObject({
        status: 'pending',
        key,
        seq: 1,
        attempts: 1,
        processedAt: null,
        result: null,
      });
      expect(waiting?.lastError).toMatch(/failing on purpose/);
      expect(waiting?.payload?.toString()).toBe('{"amount":4}');
      expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 1, state: 'open' });
      // The next seq waits behind it, as it did when the claim wrote the row.
      expect((await send(`${key}-2`, key, 2, 5)).body).toMatchObject({ status: 'held', expected: 1 });
      expect(await entries(key)).toEqual([]);

      const again = await send(`${key}-1`, key, 1, 4);
      expect(again.status).toBe(200);
      expect(again.body).toMatchObject({ status: 'processed', id: `${key}-1` });
      await app.inbox.idle();
      expect(attemptsSeen.get(`${key}-1`)).toEqual([1, 2]);
      expect(await entries(key)).toEqual([
        { id: `${key}-1`, seq: 1, amount: 4 },
        { id: `${key}-2`, seq: 2, amount: 5 },
      ]);
      expect(await app.inbox.event(`${key}-1`)).toMatchObject({
        status: 'processed',
        attempts: 1,
        key,
        seq: 1,
      });
      expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 3, heldSeqs: [] });
    });

    it('failing maxAttempts times: dead-lettered as poison, the key blocked at its seq, never applied', async () => {
      const key = uid('poison');
      app.ledger.failNext.set(key, 2);
      expect((await send(`${key}-1`, key, 1, 5)).status).toBe(500);
      const second = await send(`${key}-1`, key, 1, 5);
      expect(second.status).toBe(200);
      expect(second.body).toEqual({ status: 'dead-lettered', id: `${key}-1`, reason: 'poison' });
      expect(await app.inbox.event(`${key}-1`)).toMatchObject({
        status: 'dead',
        deadReason: 'poison',
        attempts: 2,
        key,
        seq: 1,
      });
      expect(await app.inbox.keyState(key)).toMatchObject({
        nextSeq: 1,
        state: 'blocked',
        blockedSeq: 1,
        blockedReason: 'poison',
      });
      expect((await send(`${key}-1`, key, 1, 5)).body).toEqual({
        status: 'dead-lettered',
        id: `${key}-1`,
        reason: 'poison',
      });
      expect(await entries(key)).toEqual([]);
    });
  },
);

describe.runIf(postgresTarget)(
  'a new ordered event in its turn, its key row held to COMMIT (real PostgreSQL, concurrent HTTP)',
  () => {
    let t: TargetDb;
    let app: LedgerServer;
    let url: string;
    beforeAll(async () => {
      t = await postgresTarget!.open();
      app = await startOn(t, t.db, { lockTimeoutMs: 60_000 });
      watchInvariants(app.inbox);
      url = `${app.url}/webhooks`;
    });
    afterAll(async () => {
      await app?.close();
      await t?.close();
    });
    invariantsHoldAfterEach();

    const send = (id: string, key: string | null, seq: number, amount: number) =>
      post(
        url,
        { amount },
        key === null
          ? { 'Idempotency-Key': id }
          : { 'Idempotency-Key': id, 'X-Key': key, 'X-Seq': String(seq) },
      );
    const entries = async (key: string) => (await app.ledger.account(await app.inbox.kysely(), key)).entries;
    const rowsOf = async (id: string) => {
      const { rows } = await sql<{
        n: number;
      }>`select count(*)::int as n from ${sql.table(`${t.schema}.events`)} where id = ${id}`.execute(
        await app.inbox.kysely(),
      );
      return rows[0]?.n;
    };
    /** Resolves once `n` claims wait for a lock (a lock wait is no event a client can await). */
    const claimsWaiting = async (n: number) => {
      const db = await app.inbox.kysely();
      for (let i = 0; i < 2000; i++) {
        const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
          where wait_event_type = 'Lock' and (position('.claim"(' in query) > 0 or position('"claim"(' in query) > 0)
            and pid <> pg_backend_pid()`.execute(db);
        if ((rows[0]?.n ?? 0) >= n) return;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      throw new Error(`${n} claims never waited for a lock`);
    };

    it("while its handler runs the id has no row and the cursor has not moved; the key's other claims wait, then read both", async () => {
      const key = uid('waits');
      expect((await send(`${key}-1`, key, 1, 1)).body).toMatchObject({ status: 'processed' });
      const id = `${key}-2`;
      const g = hold(id, key);
      const first = send(id, key, 2, 2);
      await g.entered;
      // What any reader without the key's lock sees: neither the row nor the cursor moved.
      expect(await rowsOf(id)).toBe(0);
      expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 2, heldSeqs: [] });
      const copy = send(id, key, 2, 2);
      const sameSeq = send(`${key}-other`, key, 2, 2);
      const next = send(`${key}-3`, key, 3, 3);
      let drained: Promise<number> | undefined;
      try {
        await claimsWaiting(3);
        drained = app.inbox.drain(key, true);
      } finally {
        g.release();
      }
      const reply = await first;
      expect(reply.body).toMatchObject({ status: 'processed', id });
      expect((await copy).body).toEqual({ status: 'duplicate', id, result: reply.body.result });
      const other = await sameSeq;
      expect(other.status).toBe(422);
      expect(other.body).toMatchObject({ field: 'x-seq' });
      expect((await next).body).toMatchObject({ status: 'processed', id: `${key}-3` });
      // A drain waiting for the key found nothing to take (it never applies seq 2 again).
      expect(await drained).toBe(0);
      await app.inbox.idle();
      expect(await entries(key)).toEqual([
        { id: `${key}-1`, seq: 1, amount: 1 },
        { id, seq: 2, amount: 2 },
        { id: `${key}-3`, seq: 3, amount: 3 },
      ]);
      expect(await app.inbox.event(id)).toMatchObject({
        status: 'processed',
        key,
        seq: 2,
        attempts: 0,
        result: reply.body.result,
      });
      expect(await app.inbox.event(`${key}-other`)).toBeUndefined();
      expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 4, heldSeqs: [] });
    });

    it("an unordered copy of the id waits for the id's lock until the ordered run commits, then is 422: one handler run", async () => {
      const key = uid('raced');
      expect((await send(`${key}-1`, key, 1, 1)).body).toMatchObject({ status: 'processed' });
      const id = `${key}-2`;
      const g = hold(id, key);
      const ordered = send(id, key, 2, 7);
      await g.entered;
      // The ordered claim holds the key row and the id's lock: the unordered copy waits for the
      // lock instead of running its handler beside the ordered one's.
      const unordered = send(id, null, 0, 7);
      try {
        await waitingForIdLock(await app.inbox.kysely(), t.schema, 1);
      } finally {
        g.release();
      }
      expect((await ordered).body).toMatchObject({ status: 'processed', id });
      const reply = await unordered;
      expect(reply.status).toBe(422);
      expect(reply.body).toMatchObject({ field: 'x-key' });
      expect(attemptsSeen.get(id)).toEqual([1]);
      expect(await entries('none').then((e) => e.filter((x) => x.id === id))).toEqual([]);
      expect(await entries(key)).toEqual([
        { id: `${key}-1`, seq: 1, amount: 1 },
        { id, seq: 2, amount: 7 },
      ]);
      expect(await app.inbox.event(id)).toMatchObject({ status: 'processed', key, seq: 2 });
      expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 3, state: 'open' });
    });

    it('the sweeper, which skips a locked key, neither skips its seq as a gap nor applies what waits behind it', async () => {
      const key = uid('swept');
      expect((await send(`${key}-1`, key, 1, 1)).body).toMatchObject({ status: 'processed' });
      expect((await send(`${key}-3`, key, 3, 3)).body).toMatchObject({ status: 'held', expected: 2 });
      const id = `${key}-2`;
      const g = hold(id, key);
      const ordered = send(id, key, 2, 2);
      await g.entered;
      // A sweeper whose gap timeout has long passed for seq 3: had it read the key without its
      // lock, it would see seq 2 missing (no row, the cursor at 2) and skip it.
      let swept = 0;
      const sweeper = createInbox({
        db: t.another(),
        schema: t.schema,
        sweepIntervalMs: 0,
        gapTimeoutMs: 1,
        onGapTimeout: 'skip',
        handle: () => {
          swept++;
        },
      });
      try {
        expect(await sweeper.sweep()).toMatchObject({
          drained: 0,
          gapsSkipped: 0,
          keysBlocked: 0,
          keyErrors: 0,
        });
      } finally {
        g.release();
        await sweeper.close();
      }
      expect((await ordered).body).toMatchObject({ status: 'processed', id });
      await app.inbox.idle();
      expect(swept).toBe(0);
      expect(await entries(key)).toEqual([
        { id: `${key}-1`, seq: 1, amount: 1 },
        { id, seq: 2, amount: 2 },
        { id: `${key}-3`, seq: 3, amount: 3 },
      ]);
      expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 4, heldSeqs: [] });
    });

    it("a latest-wins claim of the id waits for the id's lock until the ordered run commits, then is refused: one handler run", async () => {
      const key = uid('latest');
      expect((await send(`${key}-1`, key, 1, 1)).body).toMatchObject({ status: 'processed' });
      const id = `${key}-2`;
      const body = { amount: 7, object: `${key}-object`, version: 1 };
      const g = hold(id, key);
      const ordered = post(url, body, { 'Idempotency-Key': id, 'X-Key': key, 'X-Seq': '2' });
      await g.entered;
      let latestRuns = 0;
      const latest = createInbox({
        db: t.another(),
        schema: t.schema,
        sweepIntervalMs: 0,
        lockTimeoutMs: 60_000,
        order: { policy: 'latest', key: '/object', version: '/version' },
        handle: () => {
          latestRuns++;
          return { latest: true };
        },
      });
      let outcome: Awaited<ReturnType<typeof latest.receive>>;
      try {
        const pending = latest.receive({
          headers: { 'content-type': 'application/json', 'idempotency-key': id },
          rawBody: Buffer.from(JSON.stringify(body)),
        });
        try {
          await waitingForIdLock(await app.inbox.kysely(), t.schema, 1);
        } finally {
          g.release();
        }
        outcome = await pending;
      } finally {
        await latest.close();
      }
      expect((await ordered).body).toMatchObject({ status: 'processed', id });
      // It read the ordered row: the id was first used under a key, never applied again.
      expect(outcome.status).toBe(422);
      expect(latestRuns).toBe(0);
      expect(attemptsSeen.get(id)).toEqual([1]);
      expect(await entries(key)).toEqual([
        { id: `${key}-1`, seq: 1, amount: 1 },
        { id, seq: 2, amount: 7 },
      ]);
      expect(await app.inbox.event(id)).toMatchObject({ status: 'processed', key, seq: 2 });
      expect(await app.inbox.keyState(key)).toMatchObject({ nextSeq: 3, state: 'open' });
    });
  },
);
