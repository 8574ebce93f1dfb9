/**
 * `bodySchema`: any Standard Schema checks the body at the door. Tested with zod and valibot
 * through the Express adapter (supertest): an invalid body is 422 naming the path of the first
 * issue, with zero rows written and zero handler runs; a valid one applies once, and the
 * handler gets the schema's output (defaults filled in), also for an event that waited held.
 */
import { randomUUID } from 'node:crypto';
import type { StandardSchemaV1 as SpecSchema } from '@standard-schema/spec';
import express from 'express';
import request from 'supertest';
import * as v from 'valibot';
import { afterAll, beforeAll, describe, expect, expectTypeOf, test } from 'vitest';
import { z } from 'zod';
import { inbox as expressInbox } from '../adapters/express.js';
import { createInbox, type Inbox, InboxOptionsError, type StandardSchemaV1 } from '../src/index.js';
import { resolveBodySchema } from '../src/options/body-schema.js';
import { filePGlite, type Target, type TargetDb, targets } from './support/databases.js';

/** The database of this file's inboxes that need one only to exist (see filePGlite). */
const memory = filePGlite();

const zodPayment = z.object({
  amount: z.number().int().positive(),
  currency: z.enum(['EUR', 'USD']).default('EUR'),
  items: z.array(z.object({ sku: z.string(), price: z.number() })).default([]),
});
const valibotPayment = v.object({
  amount: v.pipe(v.number(), v.integer(), v.minValue(1)),
  currency: v.optional(v.picklist(['EUR', 'USD']), 'EUR'),
  items: v.optional(v.array(v.object({ sku: v.string(), price: v.number() })), []),
});

describe.each(targets)('bodySchema on $name', (target: Target) => {
  describe.each([
    { vendor: 'zod', schema: zodPayment },
    { vendor: 'valibot', schema: valibotPayment },
  ])('$vendor', ({ schema }) => {
    let db: TargetDb;
    let core: Inbox;
    const seen: { id: string; body: unknown }[] = [];
    let app: express.Express;
    beforeAll(async () => {
      db = await target.open();
      core = createInbox({
        db: db.db,
        schema: db.schema,
        sweepIntervalMs: 0,
        bodySchema: schema,
        handle(event) {
          seen.push({ id: event.id, body: event.body });
          return { amount: event.body.amount, currency: event.body.currency };
        },
      });
      app = express().use('/webhooks', expressInbox(core));
    });
    afterAll(async () => {
      await core?.close();
      await db?.close();
    });

    const post = (headers: Record<string, string>, body: string) =>
      request(app)
        .post('/webhooks')
        .set({ 'content-type': 'application/json', ...headers })
        .send(body);
    const runsOf = (id: string) => seen.filter((s) => s.id === id).length;

    test('an invalid body is 422 naming the path of the first issue; nothing stored, no handler run', async () => {
      const id = `evt_${randomUUID()}`;
      const reply = await post(
        { 'idempotency-key': id },
        '{"amount": 5, "items": [{"sku": "a", "price": "free"}]}',
      );
      expect(reply.status).toBe(422);
      expect(reply.headers['content-type']).toMatch(/application\/problem\+json/);
      expect(reply.body).toMatchObject({ status: 422, field: 'body /items/0/price' });
      expect(reply.body.detail).toMatch(/^body \/items\/0\/price: /);
      const missing = await post({ 'idempotency-key': id }, '{"currency": "EUR"}');
      expect(missing.status).toBe(422);
      expect(missing.body.field).toBe('body /amount');
      expect(await core.event(id)).toBeUndefined();
      expect(runsOf(id)).toBe(0);
    });

    test('a valid body applies once, and the handler gets the schema output (defaults filled in)', async () => {
      const id = `evt_${randomUUID()}`;
      const first = await post({ 'idempotency-key': id }, '{"amount": 5}');
      expect(first.status).toBe(200);
      expect(first.body.result).toEqual({ amount: 5, currency: 'EUR' });
      const again = await post({ 'idempotency-key': id }, '{"amount": 5}');
      expect(again.status).toBe(200);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(runsOf(id)).toBe(1);
      expect(seen.find((s) => s.id === id)?.body).toEqual({ amount: 5, currency: 'EUR', items: [] });
    });

    test('a held event is checked at the door and gets the schema output when its turn comes', async () => {
      const key = `k_${randomUUID()}`;
      const bad = await post({ 'idempotency-key': `${key}-2`, 'x-key': key, 'x-seq': '2' }, '{"amount": -1}');
      expect(bad.status).toBe(422);
      expect(await core.keyState(key)).toBeUndefined();
      const held = await post({ 'idempotency-key': `${key}-2`, 'x-key': key, 'x-seq': '2' }, '{"amount": 2}');
      expect(held.status).toBe(202);
      const first = await post(
        { 'idempotency-key': `${key}-1`, 'x-key': key, 'x-seq': '1' },
        '{"amount": 1}',
      );
      expect(first.status).toBe(200);
      await core.idle();
      expect((await core.event(`${key}-2`))?.status).toBe('processed');
      expect(seen.find((s) => s.id === `${key}-2`)?.body).toEqual({ amount: 2, currency: 'EUR', items: [] });
    });

    test('a body that is not JSON is 415: a schema checks JSON', async () => {
      const id = `evt_${randomUUID()}`;
      const reply = await request(app)
        .post('/webhooks')
        .set({ 'content-type': 'text/plain', 'idempotency-key': id })
        .send('amount=5');
      expect(reply.status).toBe(415);
      expect(reply.body.field).toBe('body');
      expect(await core.event(id)).toBeUndefined();
    });
  });
});

describe('the bodySchema option', () => {
  test('something that is not a Standard Schema is refused, naming the option', () => {
    expect(() => createInbox({ db: 'memory', handle: () => {}, bodySchema: {} as never })).toThrow(
      InboxOptionsError,
    );
    expect(() =>
      createInbox({ db: 'memory', handle: () => {}, bodySchema: { parse() {} } as never }),
    ).toThrow(/bodySchema/);
  });

  test('our copy of the Standard Schema interface accepts what the spec describes', () => {
    // The spec's own type (types only, @standard-schema/spec) fits the option's type.
    expectTypeOf<SpecSchema<unknown, { n: number }>>().toExtend<StandardSchemaV1<unknown, { n: number }>>();
    expectTypeOf(zodPayment).toExtend<SpecSchema>();
    expectTypeOf(valibotPayment).toExtend<StandardSchemaV1>();
  });

  test("types event.body as the schema's output", () => {
    const inbox = createInbox({
      db: memory(),
      migrate: false,
      bodySchema: zodPayment,
      handle(event) {
        expectTypeOf(event.body).toEqualTypeOf<z.output<typeof zodPayment>>();
        // @ts-expect-error: the output has no `amout`
        return event.body.amout;
      },
    });
    const other = createInbox({
      db: memory(),
      migrate: false,
      bodySchema: valibotPayment,
      handle(event) {
        expectTypeOf(event.body.currency).toEqualTypeOf<'EUR' | 'USD'>();
      },
    });
    expect([inbox, other]).toHaveLength(2);
  });
});

/**
 * The ingest contract (v2), as a JSON Schema: every field optional but checked when
 * present, so a minimal `{ sequence_id, data }` passes.
 */
const contract = {
  type: 'object',
  properties: {
    sequence_id: { type: 'integer', minimum: 1 },
    idempotency_key: { type: 'string', minLength: 1 },
    event_type: { enum: ['ledger.credit', 'ledger.debit', 'payment.cleared'] },
    timestamp: { type: 'string', format: 'date-time' },
    payload_version: { type: 'string', pattern: '^v\\d+$' },
    data: {},
  },
  required: ['sequence_id'],
};

describe.each(targets)('bodySchema as a JSON Schema on $name', (target: Target) => {
  describe.each([
    {
      dialect: 'draft-07',
      schema: {
        $schema: 'http://json-schema.org/draft-07/schema#',
        ...contract,
        // draft-07: `items` as an array is a tuple.
        properties: {
          ...contract.properties,
          pair: { type: 'array', items: [{ type: 'string' }, { type: 'integer' }] },
        },
      },
    },
    {
      dialect: '2020-12',
      schema: {
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        ...contract,
        // 2020-12: a tuple is `prefixItems`.
        properties: {
          ...contract.properties,
          pair: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'integer' }] },
        },
      },
    },
    {
      dialect: '2020-12 (no $schema)',
      schema: {
        ...contract,
        properties: {
          ...contract.properties,
          pair: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'integer' }] },
        },
      },
    },
  ])('$dialect', ({ schema }) => {
    let db: TargetDb;
    let core: Inbox;
    const seen: { id: string; body: unknown }[] = [];
    let app: express.Express;
    beforeAll(async () => {
      db = await target.open();
      core = createInbox({
        db: db.db,
        schema: db.schema,
        sweepIntervalMs: 0,
        bodySchema: schema,
        handle(event) {
          seen.push({ id: event.id, body: event.body });
          return null;
        },
      });
      app = express().use('/webhooks', expressInbox(core));
    });
    afterAll(async () => {
      await core?.close();
      await db?.close();
    });
    const post = (id: string, body: string, contentType = 'application/json') =>
      request(app).post('/webhooks').set({ 'content-type': contentType, 'idempotency-key': id }).send(body);
    const runsOf = (id: string) => seen.filter((s) => s.id === id).length;

    test('a valid body applies once and reaches the handler as sent; a minimal one passes', async () => {
      const id = `evt_${randomUUID()}`;
      const body = {
        sequence_id: 3,
        idempotency_key: 'test-3',
        event_type: 'ledger.credit',
        timestamp: '2026-11-26T09:00:00Z',
        payload_version: 'v2',
        data: { amount: 5 },
      };
      expect((await post(id, JSON.stringify(body))).status).toBe(200);
      expect(seen.find((s) => s.id === id)?.body).toEqual(body);
      const minimal = `evt_${randomUUID()}`;
      expect((await post(minimal, '{"sequence_id": 7, "data": "dropped"}')).status).toBe(200);
      expect(runsOf(minimal)).toBe(1);
    });

    test.each([
      ['{"sequence_id": 0}', 'body /sequence_id', 'body /sequence_id: must be >= 1'],
      ['{"sequence_id": 1.5}', 'body /sequence_id', 'body /sequence_id: must be integer'],
      ['{"data": {}}', 'body /sequence_id', 'body /sequence_id: is required'],
      [
        '{"sequence_id": 1, "event_type": "ledger.refund"}',
        'body /event_type',
        'body /event_type: must be one of "ledger.credit", "ledger.debit", "payment.cleared"',
      ],
      [
        '{"sequence_id": 1, "timestamp": "yesterday"}',
        'body /timestamp',
        'body /timestamp: must match format "date-time"',
      ],
      [
        '{"sequence_id": 1, "payload_version": "2"}',
        'body /payload_version',
        /^body \/payload_version: must match pattern/,
      ],
      ['{"sequence_id": 1, "pair": ["a", "b"]}', 'body /pair/1', 'body /pair/1: must be integer'],
      ['[1, 2]', 'body', 'body: must be object'],
    ])('%s is 422 naming %s; nothing stored, no handler run', async (body, field, detail) => {
      const id = `evt_${randomUUID()}`;
      const reply = await post(id, body);
      expect(reply.status).toBe(422);
      expect(reply.headers['content-type']).toMatch(/application\/problem\+json/);
      expect(reply.body).toMatchObject({ status: 422, field });
      expect(reply.body.detail).toMatch(detail);
      expect(await core.event(id)).toBeUndefined();
      expect(runsOf(id)).toBe(0);
    });

    test('a body that is not JSON is 415', async () => {
      const id = `evt_${randomUUID()}`;
      const reply = await post(id, 'sequence_id=1', 'text/plain');
      expect(reply.status).toBe(415);
      expect(await core.event(id)).toBeUndefined();
    });
  });
});

describe('the bodySchema option with a JSON Schema', () => {
  const inboxWith = (bodySchema: unknown) =>
    createInbox({ db: memory(), migrate: false, handle: () => {}, bodySchema: bodySchema as never });

  test.each([
    [{ type: 'objet' }, /`bodySchema` is not a valid JSON Schema \(2020-12\): schema is invalid/],
    [{ type: 'object', requried: ['a'] }, /unknown keyword: "requried"/],
    [{ type: 'string', format: 'no-such-format' }, /unknown format "no-such-format"/],
    [{ $ref: '#/$defs/missing' }, /can't resolve reference/],
    [
      { $schema: 'http://json-schema.org/draft-04/schema#', type: 'object' },
      /has \$schema .*draft-04.*supported/,
    ],
  ])('%j is refused at createInbox, naming bodySchema', (schema, message) => {
    expect(() => inboxWith(schema)).toThrow(InboxOptionsError);
    expect(() => inboxWith(schema)).toThrow(message);
  });

  test('without Ajv installed, a JSON Schema is refused with the install command', () => {
    const absent = (id: string) => {
      throw Object.assign(new Error(`Cannot find module '${id}'`), { code: 'MODULE_NOT_FOUND' });
    };
    expect(() => resolveBodySchema({ type: 'object' }, absent)).toThrow(InboxOptionsError);
    expect(() => resolveBodySchema({ type: 'object' }, absent)).toThrow(
      /`bodySchema` is a JSON Schema, which needs the optional peer dependencies ajv and ajv-formats: npm install ajv ajv-formats/,
    );
    // A Standard Schema never loads Ajv.
    expect(resolveBodySchema(zodPayment, absent)?.vendor).toBe('zod');
  });

  test('a JSON Schema does not type event.body: TBody is given', () => {
    const inbox = createInbox<any, { amount: number }>({
      db: memory(),
      migrate: false,
      bodySchema: { type: 'object', properties: { amount: { type: 'integer' } } },
      handle(event) {
        expectTypeOf(event.body.amount).toEqualTypeOf<number>();
      },
    });
    expect(inbox).toBeDefined();
  });
});
