/**
 * Latest-wins ordering (`order: { policy: 'latest', key, version }`): per object, an event
 * older than the last applied version is answered 200 `superseded`, recorded (a redelivery is a
 * duplicate) and counted, never applied; equal versions both apply, in arrival order; and
 * concurrent deliveries for one object never let an older version win (a property test).
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { sql } from 'kysely';
import { Registry } from 'prom-client';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { stripe } from '../src/delivery/providers.js';
import { createInbox, type Inbox, type InboxOptions, InboxOptionsError } from '../src/index.js';
import { filePGlite, type TargetDb, targets, uniqueName } from './support/databases.js';
import { sized } from './support/sizes.js';

/** The database of this file's inboxes that need one only to exist (see filePGlite). */
const memory = filePGlite();

const uid = (p: string) => `${p}_${randomBytes(6).toString('hex')}`;

interface Applied {
  id: string;
  version: number;
}

describe.each(targets)('latest wins on $name', (target) => {
  let db: TargetDb;
  beforeAll(async () => {
    db = await target.open();
  });
  const schemas: string[] = [];
  afterAll(async () => {
    // Dropped once every inbox of this target is closed.
    const dropper = createInbox({ db: db.db, handle: () => null, migrate: false, sweepIntervalMs: 0 });
    for (const schema of schemas) {
      await sql`drop schema if exists ${sql.id(schema)} cascade`.execute(await dropper.kysely());
    }
    await dropper.close();
    await db?.close();
  });

  /** An inbox whose handler records, in commit order, which event it applied. */
  async function open(extra: Partial<InboxOptions> = {}) {
    const applied: Applied[] = [];
    const registry = new Registry();
    const schema = uniqueName('wi');
    const inbox: Inbox = createInbox({
      db: db.db,
      schema,
      sweepIntervalMs: 0,
      metrics: { registry },
      order: { policy: 'latest', key: '/object', version: '/version' },
      handle: (event) => {
        applied.push({ id: event.id, version: event.body.version });
        return { applied: event.body.version };
      },
      ...extra,
    });
    const post = (id: string, object: string, version: number | string) =>
      inbox.receive({
        headers: { 'content-type': 'application/json', 'idempotency-key': id },
        rawBody: Buffer.from(JSON.stringify({ object, version })),
      });
    const superseded = async () => {
      const text = await registry.metrics();
      const line = text
        .split('\n')
        .find((l) => l.startsWith('webhook_inbox_deliveries_total') && l.includes('outcome="superseded"'));
      return line ? Number(line.split(' ').pop()) : 0;
    };
    const close = async () => {
      await sql`drop schema if exists ${sql.id(schema)} cascade`.execute(await inbox.kysely());
      await inbox.close();
    };
    return { inbox, applied, post, superseded, close };
  }

  test('newer then older: only the newer applies; the older is 200 superseded, recorded and counted', async () => {
    const { inbox, applied, post, superseded, close } = await open();
    const object = uid('pi');
    expect((await post('new', object, 20)).status).toBe(200);
    const older = await post('old', object, 10);
    expect(older.status).toBe(200);
    expect(older.kind).toBe('superseded');
    expect(older.body).toEqual({ status: 'superseded', id: 'old', key: object, version: 10, latest: 20 });
    expect(applied).toEqual([{ id: 'new', version: 20 }]);
    expect(await superseded()).toBe(1);
    // Recorded: a redelivery is a duplicate of it, and it is visible as an event.
    const again = await post('old', object, 10);
    expect(again.status).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toMatchObject({
      status: 'duplicate',
      result: { superseded: true, version: 10, latest: 20 },
    });
    expect(await inbox.event('old')).toMatchObject({
      status: 'processed',
      result: { superseded: true, key: object },
    });
    expect(applied).toHaveLength(1);
    await close();
  });

  test('older then newer applies both, in order; equal versions apply both in arrival order', async () => {
    const { applied, post, close } = await open();
    const object = uid('pi');
    expect((await post('a', object, 1)).kind).toBe('processed');
    expect((await post('b', object, 2)).kind).toBe('processed');
    expect((await post('c', object, 2)).kind).toBe('processed');
    expect((await post('d', object, 1)).kind).toBe('superseded');
    expect(applied.map((a) => a.id)).toEqual(['a', 'b', 'c']);
    // Another object is its own stream.
    expect((await post('e', uid('pi'), 1)).kind).toBe('processed');
    await close();
  });

  test('ISO 8601 versions compare as instants; a bad version is 400 naming it; no key is unordered', async () => {
    const { inbox, applied, post, close } = await open();
    const object = uid('pi');
    expect((await post('t2', object, '2026-01-01T10:00:00.500Z')).kind).toBe('processed');
    expect((await post('t1', object, '2026-01-01T11:00:00+02:00')).kind).toBe('superseded');
    const bad = await post('t3', object, 'yesterday');
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({
      field: 'body /version',
      detail: 'body /version must be an integer or an ISO 8601 date-time',
    });
    const keyless = await inbox.receive({
      headers: { 'content-type': 'application/json', 'idempotency-key': 'k' },
      rawBody: Buffer.from('{"version":1}'),
    });
    expect(keyless.kind).toBe('processed');
    expect(applied.map((a) => a.id)).toEqual(['t2', 'k']);
    await close();
  });

  test('deferred mode: 202, then the worker applies the newer and records the older superseded', async () => {
    const { inbox, applied, post, close } = await open({ mode: 'deferred', workers: 2, pollIntervalMs: 20 });
    const object = uid('pi');
    expect((await post('new', object, 20)).status).toBe(202);
    await vi.waitFor(async () => expect((await inbox.event('new'))?.status).toBe('processed'), {
      timeout: 10_000,
      interval: 10,
    });
    expect((await post('old', object, 10)).status).toBe(202);
    await vi.waitFor(async () => expect((await inbox.event('old'))?.status).toBe('processed'), {
      timeout: 10_000,
      interval: 10,
    });
    expect(applied).toEqual([{ id: 'new', version: 20 }]);
    expect(await inbox.event('old')).toMatchObject({
      result: { superseded: true, key: object, version: 10, latest: 20 },
    });
    // A redelivery is a duplicate, answered with the recorded result.
    expect((await post('old', object, 10)).body).toMatchObject({
      status: 'duplicate',
      result: { superseded: true, version: 10, latest: 20 },
    });
    expect((await post('newer', object, 30)).status).toBe(202);
    await vi.waitFor(() => expect(applied.map((a) => a.id)).toEqual(['new', 'newer']), {
      timeout: 10_000,
      interval: 10,
    });
    await close();
  });

  test.each(['inline', 'deferred'] as const)(
    'concurrent deliveries for one object never let an older version win (property, %s mode)',
    async (mode) => {
      const deferred = mode === 'deferred';
      const { inbox, applied, post, close } = await open(
        deferred ? { poolSize: 8, mode, workers: 4, pollIntervalMs: 20 } : { poolSize: 8 },
      );
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 2, maxLength: 12 }),
          async (versions) => {
            const object = uid('obj');
            const from = applied.length;
            const ids = versions.map(() => uid('evt'));
            // Every delivery at once, and each twice (a retry racing its original).
            const outcomes = await Promise.all(
              [...versions, ...versions].map((v, i) => post(ids[i % versions.length] as string, object, v)),
            );
            // Inline: applied or superseded now; deferred: stored (202), or already applied (200).
            for (const o of outcomes)
              expect(o.status, JSON.stringify(o.body)).toBe(deferred ? (o.status === 200 ? 200 : 202) : 200);
            if (deferred) {
              await vi.waitFor(
                async () => {
                  for (const id of ids) expect((await inbox.event(id))?.status).toBe('processed');
                },
                { timeout: 20_000, interval: 20 },
              );
            }
            const mine = applied.slice(from);
            // Applied in non-decreasing version order, each event at most once, the newest included.
            for (let i = 1; i < mine.length; i++)
              expect(mine[i]!.version).toBeGreaterThanOrEqual(mine[i - 1]!.version);
            expect(new Set(mine.map((a) => a.id)).size).toBe(mine.length);
            expect(mine.at(-1)?.version).toBe(Math.max(...versions));
            // Every event was answered for: applied or superseded, never lost.
            for (const id of ids) expect((await inbox.event(id))?.status).toBe('processed');
          },
        ),
        { numRuns: target.name === 'pglite' ? sized(5, 10) : sized(10, 25) },
      );
      await close();
    },
  );
});

describe('latest wins with a provider preset', () => {
  test('stripe fills key (data.object.id) and version (created)', async () => {
    const secret = `whsec_${randomBytes(16).toString('hex')}`;
    const applied: string[] = [];
    const inbox = createInbox({
      db: memory(),
      sweepIntervalMs: 0,
      provider: stripe({ secret }),
      order: { policy: 'latest' },
      handle: (e) => void applied.push(e.id),
    });
    const deliver = (id: string, created: number) => {
      const payload = JSON.stringify({
        id,
        type: 'payment_intent.updated',
        created,
        data: { object: { id: 'pi_1' } },
      });
      return inbox.receive({
        headers: {
          'content-type': 'application/json',
          'stripe-signature': Stripe.webhooks.generateTestHeaderString({ payload, secret }),
        },
        rawBody: Buffer.from(payload),
      });
    };
    expect((await deliver('evt_new', 200)).kind).toBe('processed');
    expect((await deliver('evt_old', 100)).body).toMatchObject({
      status: 'superseded',
      key: 'pi_1',
      version: 100,
      latest: 200,
    });
    expect(applied).toEqual(['evt_new']);
    await inbox.close();
  });

  test.each([
    [{ order: { policy: 'latest' } }, 'order.key'],
    [{ order: { policy: 'latest', key: '/k' } }, 'order.version'],
    [{ order: { policy: 'newest' } }, 'order'],
    [{ provider: stripe({ secret: 'whsec_x', order: false }), order: { policy: 'latest' } }, 'order.key'],
  ])('%j is refused naming %s', (options, option) => {
    expect(() => createInbox({ db: 'memory', handle: () => null, ...(options as object) })).toThrow(
      expect.objectContaining({ name: InboxOptionsError.name, option }),
    );
  });
});
