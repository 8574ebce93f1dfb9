import Fastify from 'fastify';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inbox as fastifyInbox } from '../adapters/fastify.js';
import { createInbox, type Inbox, InboxStartError, type PgPoolLike } from '../src/index.js';
import { postgresTarget, type TargetDb } from './support/databases.js';

// Real PostgreSQL: a pool whose first connection attempt fails (the server was restarting),
// then works, as a real pool does once the server is back.
describe.skipIf(!postgresTarget)('an inbox whose first start failed', () => {
  let t: TargetDb;
  let inbox: Inbox;
  let failures = 1;
  const applied: string[] = [];
  beforeAll(async () => {
    t = await postgresTarget!.open();
    const real = t.db as pg.Pool;
    const flaky: PgPoolLike = {
      connect: () => {
        if (failures-- > 0) return Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:5432'));
        return real.connect();
      },
    };
    inbox = createInbox({
      db: flaky,
      schema: t.schema,
      sweepIntervalMs: 0,
      handle: (event) => {
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

  it('answers 503 while the database is unreachable, then opens it on the next delivery', async () => {
    expect((await deliver('e1')).status).toBe(503);
    expect((await deliver('e1')).kind).toBe('processed');
    expect(applied).toEqual(['e1']);
  });
});

/**
 * The inbox starts at construction (database, migrations, sweeper, workers): nothing waits for
 * a first delivery. A restarted instance applies what the last one left waiting; a wrong
 * database is said at boot, reported by health, and answered 503 + Retry-After meanwhile.
 */
describe('an inbox starts at construction', () => {
  describe.skipIf(!postgresTarget)('restarted (postgres)', () => {
    let t: TargetDb;
    beforeAll(async () => {
      t = await postgresTarget!.open();
    });
    afterAll(async () => {
      await t.close();
    });

    it('applies its held and retrying events with no new delivery', async () => {
      const options = { db: t.db, schema: t.schema, retryBaseMs: 1, gapTimeoutMs: 1 };
      const before = createInbox({
        ...options,
        sweepIntervalMs: 0,
        handle: (event) => {
          if (event.id === 'retrying') throw new Error('downstream is down');
        },
        logger: false,
      });
      const send = (inbox: Inbox, id: string, headers: Record<string, string> = {}) =>
        inbox.receive({ headers: { 'idempotency-key': id, ...headers }, rawBody: Buffer.from('x') });
      expect((await send(before, 'retrying')).status).toBe(500);
      expect((await send(before, 'held', { 'x-key': 'k', 'x-seq': '2' })).status).toBe(202);
      await before.close();

      // The next instance is only constructed: no delivery, no ready(), no sweep().
      const applied: string[] = [];
      let allApplied!: () => void;
      const done = new Promise<void>((resolve) => {
        allApplied = resolve;
      });
      const after = createInbox({
        ...options,
        sweepIntervalMs: 10,
        handle: (event) => {
          applied.push(event.id);
          if (applied.length === 2) allApplied();
        },
      });
      await done;
      await after.idle();
      expect(applied.sort()).toEqual(['held', 'retrying']);
      expect((await after.event('retrying'))?.status).toBe('processed');
      expect((await after.event('held'))?.status).toBe('processed');
      await after.close();
    }, 20_000);
  });

  it('a wrong database fails ready() loudly, health() reports it, and deliveries get 503 + Retry-After', async () => {
    const lines: { level: string; msg?: string; obj: any }[] = [];
    const at = (level: string) => (obj: object, msg?: string) => lines.push({ level, msg, obj });
    const inbox = createInbox({
      db: 'postgres://postgres@127.0.0.1:1/nowhere',
      logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') },
      handle: () => {},
    });
    try {
      await expect(inbox.ready()).rejects.toThrow(/ECONNREFUSED/);
      expect(lines).toContainEqual(
        expect.objectContaining({
          level: 'error',
          msg: expect.stringMatching(
            /^webhook-inbox: could not start: .*ECONNREFUSED.*is the database running/,
          ),
        }),
      );
      expect(await inbox.health()).toMatchObject({
        ok: false,
        postgres: 'down',
        error: expect.stringContaining('ECONNREFUSED'),
      });
      expect((await inbox.healthOutcome()).status).toBe(503);
      const outcome = await inbox.receive({
        headers: { 'idempotency-key': 'e1' },
        rawBody: Buffer.from('x'),
      });
      expect(outcome.status).toBe(503);
      expect(outcome.headers['retry-after']).toBe('1');
    } finally {
      await inbox.close();
    }
  });

  it('under Fastify, a wrong database fails app.ready()', async () => {
    const app = Fastify();
    await app.register(fastifyInbox, {
      db: 'postgres://postgres@127.0.0.1:1/nowhere',
      logger: false,
      handle: () => {},
    });
    await expect(app.ready()).rejects.toThrow(/ECONNREFUSED/);
    await app.close();
  });

  it("ready() after a failed start rejects with the library's InboxStartError naming the fix, the log line saying the same", async () => {
    const lines: string[] = [];
    const inbox = createInbox({
      db: 'postgres://postgres@127.0.0.1:1/nowhere',
      logger: { error: (_obj: object, msg?: string) => lines.push(msg ?? '') },
      handle: () => {},
    });
    try {
      const err = await inbox.ready().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(InboxStartError);
      const { name, message, code, cause } = err as InboxStartError;
      expect({ name, code }).toEqual({ name: 'InboxStartError', code: 'start-failed' });
      expect(message).toBe(
        'webhook-inbox: could not start: connect ECONNREFUSED 127.0.0.1:1 (is the database running, and is `db` its address?)',
      );
      // The pool's own error, stack and all, is the cause; the message carries none of it.
      expect((cause as { code?: string }).code).toBe('ECONNREFUSED');
      expect(message).not.toMatch(/\n\s+at /);
      expect(lines[0]).toBe(`${message}; retrying, deliveries are answered 503 meanwhile`);
    } finally {
      await inbox.close();
    }
  });
});
