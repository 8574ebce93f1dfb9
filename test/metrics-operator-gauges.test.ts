/**
 * The gauges the alert rules in ops/ need, read from the scrape-time stats query:
 * webhook_inbox_pending_events, webhook_inbox_oldest_blocked_key_age_seconds, and
 * webhook_inbox_database_up (1 while the query answers, 0 when the database cannot be reached).
 */
import { sql } from 'kysely';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { createInbox, type Inbox, METRIC_NAMES } from '../src/index.js';
import { type TargetDb, targets } from './support/databases.js';

const target = targets.at(-1)!;
let db: TargetDb;

async function read(registry: Registry, name: string): Promise<number | undefined> {
  const metric = registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name}`);
  const { values } = await metric.get();
  return values.find((v) => v.labels.source === 'default')?.value;
}

beforeAll(async () => {
  db = await target.open();
});
afterAll(async () => {
  await db?.close();
});

test('pending events, the oldest blocked key age, and database up', async () => {
  const registry = new Registry();
  const inbox: Inbox = createInbox({
    db: db.db,
    schema: db.schema,
    sweepIntervalMs: 0,
    mode: 'deferred',
    workers: 0,
    metrics: { registry },
    handle: () => {},
  });
  try {
    await inbox.ready();
    const k = await inbox.kysely();
    expect(await read(registry, METRIC_NAMES.databaseUp)).toBe(1);
    expect(await read(registry, METRIC_NAMES.pendingEvents)).toBe(0);
    expect(await read(registry, METRIC_NAMES.oldestBlockedKeyAge)).toBe(0);
    // Two pending events, and a key blocked ten minutes ago (as `fail` leaves one).
    const events = sql.raw(inbox.tables.events);
    const keys = sql.raw(inbox.tables.keys);
    for (const id of ['p-1', 'p-2']) {
      await sql`insert into ${events} (source, id, body_hash, status, stream) values ('default', ${id}, '0', 'pending', ${id})`.execute(
        k,
      );
    }
    await sql`insert into ${keys} (source, key, next_seq, state, blocked_seq, blocked_reason, updated_at, stream)
              values ('default', 'acct', 1, 'blocked', 1, 'poison', now() - interval '10 minutes', 'acct')`.execute(
      k,
    );
    expect(await read(registry, METRIC_NAMES.pendingEvents)).toBe(2);
    const age = (await read(registry, METRIC_NAMES.oldestBlockedKeyAge))!;
    expect(age).toBeGreaterThanOrEqual(600);
    expect(age).toBeLessThan(660);
  } finally {
    await inbox.close();
  }
});

test.skipIf(target.name !== 'postgres')(
  'database up is 0 when the stats query cannot reach the database',
  async () => {
    const registry = new Registry();
    // A port nothing listens on: the stats query fails; the scrape must not.
    const inbox = createInbox({
      db: 'postgres://postgres@127.0.0.1:1/nothing',
      sweepIntervalMs: 0,
      metrics: { registry },
      handle: () => {},
    });
    try {
      await inbox.ready().catch(() => {});
      await expect(registry.metrics()).resolves.toContain(METRIC_NAMES.databaseUp);
      expect(await read(registry, METRIC_NAMES.databaseUp)).toBe(0);
    } finally {
      await inbox.close();
    }
  },
);
