/**
 * The handler's context around `handlerTimeoutMs`: `ctx.signal` is made only when the handler
 * reads it, so these pin that a signal read late is the same as one read at the start — already
 * aborted with the timeout once the deadline passed — and that the run is rejected and its
 * `tx` refused whether or not the handler ever looked at the signal.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { HandlerTimeoutError } from '../src/errors.js';
import { createInbox, type HandlerContext, type Inbox } from '../src/index.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';

const target = targets.at(-1)!;

interface Seen {
  aborted: boolean;
  reason: unknown;
  sameSignal: boolean;
  queryError?: unknown;
}

/** A promise with its resolve, for a handler and a test to wait on each other. */
function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe(`ctx.signal and handlerTimeoutMs (${target.name})`, () => {
  let db: TargetDb;
  let timed: Inbox;
  let untimed: Inbox;
  const schemas = [uniqueName('wi'), uniqueName('wi')];
  /** Per event id: what the test releases, and what the handler saw. */
  const gates = new Map<string, Promise<void>>();
  const seen = new Map<string, ReturnType<typeof deferred<Seen>>>();

  async function look(ctx: HandlerContext, id: string): Promise<void> {
    const signal = ctx.signal;
    const result: Seen = {
      aborted: signal.aborted,
      reason: signal.reason,
      sameSignal: signal === ctx.signal,
    };
    try {
      await sql`select 1`.execute(ctx.tx);
    } catch (err) {
      result.queryError = err;
    }
    seen.get(id)!.resolve(result);
  }

  beforeAll(async () => {
    db = await target.open();
    timed = createInbox({
      db: db.db,
      schema: schemas[0],
      sweepIntervalMs: 0,
      handlerTimeoutMs: 100,
      async handle(event, ctx) {
        const how = (event.body as { how: string }).how;
        if (how === 'late') {
          // Never looks at the signal until the test says the delivery was answered.
          await gates.get(event.id);
          await look(ctx, event.id);
        } else if (how === 'early') {
          const signal = ctx.signal;
          const before = signal.aborted;
          await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
          seen
            .get(event.id)!
            .resolve({ aborted: before, reason: signal.reason, sameSignal: signal === ctx.signal });
        }
        return { how };
      },
    });
    untimed = createInbox({
      db: db.db,
      schema: schemas[1],
      sweepIntervalMs: 0,
      handlerTimeoutMs: 0,
      async handle(event, ctx) {
        await look(ctx, event.id);
        return { ok: true };
      },
    });
  });
  afterAll(async () => {
    await timed?.close();
    await untimed?.close();
    if (target.name === 'postgres') {
      const { default: pg } = await import('pg');
      for (const s of schemas)
        await (db.db as InstanceType<typeof pg.Pool>).query(`drop schema if exists "${s}" cascade`);
    }
    await db?.close();
  });

  const deliver = (inbox: Inbox, id: string, how: string) =>
    inbox.receive({
      headers: { 'idempotency-key': id, 'content-type': 'application/json' },
      rawBody: Buffer.from(JSON.stringify({ how })),
    });

  test('a signal first read after the deadline is already aborted with the timeout; tx refuses queries', async () => {
    const id = uniqueName('late');
    const gate = deferred();
    gates.set(id, gate.promise);
    seen.set(id, deferred<Seen>());
    const outcome = await deliver(timed, id, 'late');
    expect(outcome).toMatchObject({ status: 500, kind: 'failed' });
    gate.resolve();
    const s = await seen.get(id)!.promise;
    expect(s.aborted).toBe(true);
    expect(s.reason).toBeInstanceOf(HandlerTimeoutError);
    expect((s.reason as HandlerTimeoutError).timeoutMs).toBe(100);
    expect(s.sameSignal).toBe(true);
    expect(s.queryError).toBe(s.reason);
    expect(await timed.event(id)).toMatchObject({ status: 'pending', attempts: 1 });
  });

  test('a signal read before the deadline is aborted at it, its listener called with the timeout', async () => {
    const id = uniqueName('early');
    seen.set(id, deferred<Seen>());
    const outcome = await deliver(timed, id, 'early');
    expect(outcome).toMatchObject({ status: 500, kind: 'failed' });
    const s = await seen.get(id)!.promise;
    expect(s.aborted).toBe(false);
    expect(s.reason).toBeInstanceOf(HandlerTimeoutError);
    expect(s.sameSignal).toBe(true);
    expect(await timed.event(id)).toMatchObject({ status: 'pending', attempts: 1 });
  });

  test('a handler that finishes in time is applied; with handlerTimeoutMs 0 the signal never aborts', async () => {
    const quick = uniqueName('quick');
    expect(await deliver(timed, quick, 'quick')).toMatchObject({ status: 200, kind: 'processed' });
    expect(await timed.event(quick)).toMatchObject({ status: 'processed' });

    const id = uniqueName('untimed');
    seen.set(id, deferred<Seen>());
    expect(await deliver(untimed, id, 'any')).toMatchObject({ status: 200, kind: 'processed' });
    const s = await seen.get(id)!.promise;
    expect(s).toEqual({ aborted: false, reason: undefined, sameSignal: true });
  });
});
