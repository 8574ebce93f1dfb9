/**
 * The examples of docs/routing.md run: each inbox, on an embedded database, applies a delivery
 * signed as its provider signs it with the handler of its type, records another type ignored,
 * and docs/routing.md shows each example's file as it is (its imports as a user writes them).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { sign as octokitSign } from '@octokit/webhooks-methods';
import { sql } from 'kysely';
import Stripe from 'stripe';
import { afterEach, describe, expect, test } from 'vitest';
import { githubInbox } from '../examples/routing/github.js';
import { stripeInbox } from '../examples/routing/stripe.js';
import type { Inbox } from '../src/index.js';

const opened: Inbox[] = [];
afterEach(async () => {
  for (const inbox of opened.splice(0)) await inbox.close();
});

describe('docs/routing.md shows the examples as they are', () => {
  const page = readFileSync('docs/routing.md', 'utf8');
  test.each(['examples/routing/stripe.ts', 'examples/routing/github.ts'])('%s', (file) => {
    const asUserWritesIt = readFileSync(file, 'utf8')
      .replace("'../../src/index.js'", "'webhook-inbox'")
      .replace("'../../src/delivery/providers.js'", "'webhook-inbox/providers'");
    expect(page).toContain(asUserWritesIt.trim());
  });
});

test('Stripe: invoice.paid and customer.* reach their handlers; charge.refunded is ignored', async () => {
  const secret = `whsec_${randomBytes(16).toString('hex')}`;
  const inbox = stripeInbox({ db: new PGlite(), secret });
  opened.push(inbox);
  const k = await inbox.kysely();
  await sql`create table invoices (id text primary key, customer text, amount_paid int)`.execute(k);
  await sql`create table customers (id text primary key, email text, deleted boolean)`.execute(k);
  const deliver = (type: string, object: Record<string, unknown>) => {
    const id = `evt_${randomUUID()}`;
    const body = JSON.stringify({ id, object: 'event', type, created: 1, data: { object } });
    const header = Stripe.webhooks.generateTestHeaderString({ payload: body, secret });
    return inbox.receive({
      headers: { 'stripe-signature': header, 'content-type': 'application/json' },
      rawBody: Buffer.from(body),
    });
  };
  const paid = await deliver('invoice.paid', { id: 'in_1', customer: 'cus_1', amount_paid: 500 });
  expect(paid.body).toMatchObject({ status: 'processed', result: { invoice: 'in_1' } });
  await deliver('customer.created', { id: 'cus_1', email: 'a@example.com' });
  await deliver('customer.deleted', { id: 'cus_1', email: 'a@example.com' });
  const refunded = await deliver('charge.refunded', { id: 'ch_1' });
  expect(refunded.status).toBe(200);
  expect(refunded.body).toMatchObject({ status: 'ignored', type: 'charge.refunded' });
  expect((await sql`select * from invoices`.execute(k)).rows).toEqual([
    { id: 'in_1', customer: 'cus_1', amount_paid: 500 },
  ]);
  expect((await sql`select * from customers`.execute(k)).rows).toEqual([
    { id: 'cus_1', email: 'a@example.com', deleted: true },
  ]);
});

test('GitHub: issues.* and ping reach their handlers; star.created is ignored', async () => {
  const secret = 'github-secret';
  const inbox = githubInbox({ db: new PGlite(), secret });
  opened.push(inbox);
  const k = await inbox.kysely();
  await sql`create table issues (repository text, number int, title text, state text, primary key (repository, number))`.execute(
    k,
  );
  const deliver = async (event: string, payload: Record<string, unknown>) => {
    const body = JSON.stringify(payload);
    return inbox.receive({
      headers: {
        'content-type': 'application/json',
        'x-github-event': event,
        'x-github-delivery': randomUUID(),
        'x-hub-signature-256': await octokitSign(secret, body),
      },
      rawBody: Buffer.from(body),
    });
  };
  const issue = { number: 7, title: 'Crash' };
  const repository = { full_name: 'acme/app' };
  await deliver('issues', { action: 'opened', issue, repository });
  await deliver('issues', { action: 'closed', issue, repository });
  expect((await deliver('ping', { zen: 'Keep it simple', hook_id: 42 })).body).toMatchObject({
    result: { pong: 42 },
  });
  const star = await deliver('star', { action: 'created', repository });
  expect(star.body).toMatchObject({ status: 'ignored', type: 'star.created' });
  expect((await sql`select * from issues`.execute(k)).rows).toEqual([
    { repository: 'acme/app', number: 7, title: 'Crash', state: 'closed' },
  ]);
});
