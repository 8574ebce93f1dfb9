/**
 * The Next.js-style route handler example (examples/nextjs), driven the way Next.js drives it:
 * its exported `POST` called with plain `Request` objects, no Next.js installed. A duplicate is
 * replayed without a second note; an out-of-order pair is applied in seq order.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { postgresUrl, uniqueName } from './support/databases.js';

const inboxSchema = uniqueName('wi');
const appSchema = uniqueName('app');
process.env.DATABASE_URL = postgresUrl ?? '';
if (!postgresUrl) delete process.env.DATABASE_URL; // PGlite in memory
process.env.INBOX_SCHEMA = inboxSchema;
process.env.APP_SCHEMA = appSchema;
const route = await import('../examples/nextjs/app/webhooks/route.js');
const lib = await import('../examples/nextjs/lib/inbox.js');

beforeAll(async () => {
  await lib.createNotesTable();
});
afterAll(async () => {
  await sql`drop schema if exists ${sql.id(inboxSchema)}, ${sql.id(appSchema)} cascade`.execute(
    await lib.inbox.kysely(),
  );
  await lib.inbox.close();
});

const post = (headers: Record<string, string>, body: unknown) =>
  route.POST(
    new Request('http://localhost/webhooks', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    }),
  );

test('a duplicate is replayed with its stored result and adds no second note', async () => {
  const id = `evt_${randomUUID()}`;
  const first = await post({ 'idempotency-key': id }, { note: 'once' });
  expect(first.status).toBe(200);
  expect(await first.json()).toMatchObject({ result: { noted: id } });
  const again = await post({ 'idempotency-key': id }, { note: 'once' });
  expect(again.status).toBe(200);
  expect(again.headers.get('idempotent-replayed')).toBe('true');
  expect(await again.json()).toMatchObject({ result: { noted: id } });
  expect((await lib.notes()).filter((n) => n.event_id === id)).toHaveLength(1);
});

test('an out-of-order pair is held, then applied in seq order', async () => {
  const key = `order_${randomUUID()}`;
  const second = await post(
    { 'idempotency-key': `${key}-2`, 'x-key': key, 'x-seq': '2' },
    { note: 'shipped' },
  );
  expect(second.status).toBe(202);
  const first = await post({ 'idempotency-key': `${key}-1`, 'x-key': key, 'x-seq': '1' }, { note: 'paid' });
  expect(first.status).toBe(200);
  await route.POST.inbox.idle(); // the held seq 2 is drained right after seq 1's response
  const applied = (await lib.notes()).filter((n) => n.key === key);
  expect(applied.map((n) => [n.seq, n.note])).toEqual([
    [1, 'paid'],
    [2, 'shipped'],
  ]);
});

test('GET /webhooks/health answers the health probe; PUT is 405', async () => {
  const health = await route.GET(new Request('http://localhost/webhooks/health'));
  expect(health.status).toBe(200);
  const put = await route.POST(new Request('http://localhost/webhooks', { method: 'PUT', body: '{}' }));
  expect(put.status).toBe(405);
  expect(put.headers.get('allow')).toBe('POST');
});
