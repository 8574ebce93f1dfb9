/**
 * Field sources beyond the conformance table (which runs body pointers through every adapter):
 * a constant key (one stream for every event), a function of the delivery, pointers into
 * nested objects and arrays, a body field read whatever the content type, and the options'
 * errors, which name the option.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { createInbox, type Inbox, type InboxOptions, InboxOptionsError } from '../src/index.js';
import { pgliteTarget } from './support/databases.js';
import { perTestSchemas } from './support/per-test-schemas.js';

// One embedded database for the file, a fresh schema per test (dropped after the test's
// inboxes are closed: hooks after a test run in the reverse of the order they were added).
const database = perTestSchemas(pgliteTarget);
const inboxes: Inbox[] = [];
afterEach(async () => {
  await Promise.all(inboxes.splice(0).map((i) => i.close()));
});

function open(options: Partial<InboxOptions>, applied: unknown[] = []) {
  const { db, schema } = database();
  const inbox = createInbox({
    db,
    schema,
    sweepIntervalMs: 0,
    handle: (e) => {
      applied.push({ id: e.id, key: e.key, seq: e.seq });
      return null;
    },
    ...options,
  });
  inboxes.push(inbox);
  return inbox;
}

const post = (inbox: Inbox, body: unknown, headers: Record<string, string> = {}) =>
  inbox.receive({
    headers: { 'content-type': 'application/json', ...headers },
    rawBody: Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)),
  });

describe('field sources', () => {
  test('a constant key makes one stream: body seqs are buffered and applied in order', async () => {
    const applied: unknown[] = [];
    const inbox = open(
      { fields: { id: '/idempotency_key', key: { constant: 'ledger' }, seq: '/sequence_id' } },
      applied,
    );
    expect((await post(inbox, { idempotency_key: 'b', sequence_id: 2 })).status).toBe(202);
    expect((await post(inbox, { idempotency_key: 'a', sequence_id: 1 })).status).toBe(200);
    await inbox.idle();
    expect(applied).toEqual([
      { id: 'a', key: 'ledger', seq: 1 },
      { id: 'b', key: 'ledger', seq: 2 },
    ]);
  });

  test('a function of the delivery, and pointers into nested objects and arrays', async () => {
    const applied: unknown[] = [];
    const inbox = open(
      {
        fields: {
          id: (d) => `${d.headers['x-topic']}:${(d.body as { event: { id: number } }).event.id}`,
          key: { body: '/items/0/sku' },
          seq: '/event/version',
        },
      },
      applied,
    );
    const r = await post(
      inbox,
      { event: { id: 42, version: 1 }, items: [{ sku: 'a/b~c' }] },
      { 'x-topic': 'orders' },
    );
    expect(r.status).toBe(200);
    expect(applied).toEqual([{ id: 'orders:42', key: 'a/b~c', seq: 1 }]);
  });

  test('a body field is read from JSON sent as text/plain; a body that is not JSON names the field', async () => {
    const inbox = open({ fields: { id: '/id' } });
    const ok = await post(inbox, '{"id":"evt_1"}', { 'content-type': 'text/plain' });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ status: 'processed', id: 'evt_1' });
    const bad = await post(inbox, 'not json', { 'content-type': 'text/plain' });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ field: 'body /id', detail: 'body /id requires a JSON body' });
    const object = await post(inbox, { id: { nested: true } });
    expect(object.status).toBe(400);
    expect(object.body).toMatchObject({
      field: 'body /id',
      detail: 'body /id must be a string or an integer',
    });
  });

  test.each([
    [{ fields: { seq: 'x seq' } }, 'fields.seq'],
    [{ fields: { id: { body: 'id' } } }, 'fields.id'],
    [{ fields: { id: '/a~2' } }, 'fields.id'],
    [{ fields: { key: { constant: null } } }, 'fields.key'],
    [{ fields: { key: { header: 'x-a', body: '/a' } } }, 'fields.key'],
    [{ fields: { version: '/v' } }, 'fields.version'],
    [{ fields: 'id' }, 'fields'],
  ])('%j is refused naming %s', (options, option) => {
    expect(() => createInbox({ db: 'memory', handle: () => null, ...(options as object) })).toThrow(
      expect.objectContaining({ name: InboxOptionsError.name, option }),
    );
  });
});
