/**
 * Every preset routes by its provider's own type: a delivery signed as the provider signs it
 * (test/support/provider-deliveries.ts) reaches the handler registered for its type, with
 * `event.type` set where the provider puts it (GitHub's event and action, Shopify's topic
 * header, Slack's inner event, …); a type no handler takes is answered 200 `ignored` and
 * recorded so. A `RejectEvent` is answered in the provider's own words where it has them.
 * Over the Express adapter (a real socket), on real PostgreSQL when it is here (else PGlite).
 */
import express from 'express';
import request from 'supertest';
import { beforeAll, describe, expect, test } from 'vitest';
import { inbox as expressInbox } from '../adapters/express.js';
import { providers } from '../src/delivery/providers.js';
import { createInbox, type Inbox, RejectEvent } from '../src/index.js';
import { suiteDatabase, targets, uniqueName } from './support/databases.js';
import { cases, now, type Signed } from './support/provider-deliveries.js';

const target = targets.at(-1)!;
const suite = suiteDatabase(target);

/**
 * Two more types the case's provider could send, written as it writes types: one nobody
 * handles, one whose handler refuses it for good.
 */
function typesOf(provider: string): { unhandled: string; refused: string } {
  if (provider === 'shopify') return { unhandled: 'carts/update', refused: 'orders/cancelled' };
  if (provider === 'github') return { unhandled: 'star.created', refused: 'issues.deleted' };
  if (provider === 'gitlab') return { unhandled: 'note', refused: 'merge_request' };
  if (provider === 'slack') return { unhandled: 'reaction_added', refused: 'team_join' };
  return { unhandled: 'charge.refunded', refused: 'invoice.voided' };
}

describe.each(cases)(`$provider routes by its type on ${target.name}`, (c) => {
  const seen: Array<{ id: string; type: string | null }> = [];
  let inbox: Inbox;
  let post: (signed: Signed) => Promise<request.Response>;
  beforeAll(async () => {
    inbox = createInbox({
      db: suite.db().db,
      schema: uniqueName('wi'),
      sweepIntervalMs: 0,
      provider: providers[c.provider]({ secret: c.secret, order: false }),
      handlers: {
        [c.type]: (event) => {
          seen.push({ id: event.id, type: event.type });
          return { handled: event.type };
        },
        [typesOf(c.provider).refused]: () => {
          throw new RejectEvent('not for us');
        },
      },
    });
    suite.track(inbox);
    const server = express().use('/webhooks', expressInbox(inbox));
    post = ({ headers, body }) =>
      request(server)
        .post('/webhooks')
        .set({ 'content-type': 'application/json', ...headers })
        .send(body);
  });

  test('its type reaches its handler with event.type; another is 200 ignored and recorded', async () => {
    const e = c.event();
    const handled = await post(await e.deliver(c.secret, now()));
    expect(handled.status, handled.text).toBe(200);
    expect(handled.body).toEqual({ status: 'processed', id: e.id, result: { handled: c.type } });
    expect(seen).toEqual([{ id: e.id, type: c.type }]);

    const type = typesOf(c.provider).unhandled;
    const other = c.event(type);
    const ignored = await post(await other.deliver(c.secret, now()));
    expect(ignored.status, ignored.text).toBe(200);
    expect(ignored.body).toEqual({ status: 'ignored', id: other.id, type });
    expect(await inbox.event(other.id)).toMatchObject({ status: 'ignored', type });
    expect((await inbox.ignored({ type })).map((i) => i.id)).toEqual([other.id]);
    expect(seen).toHaveLength(1);
  });

  test('a RejectEvent is 422, with the provider’s own “do not retry” where it has one', async () => {
    const r = await post(await c.event(typesOf(c.provider).refused).deliver(c.secret, now()));
    expect(r.status, r.text).toBe(422);
    expect(r.headers['content-type']).toMatch(/^application\/problem\+json/);
    const expected = providers[c.provider]({ secret: c.secret }).rejectHeaders;
    for (const [name, value] of Object.entries(expected)) expect(r.headers[name]).toBe(value);
    if (c.provider === 'svix' || c.provider === 'standardWebhooks')
      expect(r.headers['webhook-delivery']).toBe('abort-message');
    else if (c.provider === 'slack') expect(r.headers['x-slack-no-retry']).toBe('1');
    else expect(Object.keys(expected)).toEqual([]);
  });
});
