/**
 * A failed event keeps its type, on every path that writes or fails its row: a Stripe
 * `charge.succeeded` whose handler throws RejectEvent on its first run, one that keeps failing
 * until its budget is spent (retried from its stored row), one replayed that fails again, an
 * ordered event dead as late, and a deferred delivery stored by a batch's claim. So the type
 * filters find them (`webhook-inbox dead list --type`, the console's, `Operations`), and `dead
 * list`, `dead show` and the console's lists show it.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createConsole } from '../src/console/index.js';
import { stripe } from '../src/delivery/providers.js';
import { createInbox, type Inbox, RejectEvent } from '../src/index.js';
import { signedDelivery } from '../src/testing/index.js';
import { cli } from './support/cli.js';
import { CONSOLE_TOKEN } from './support/console.js';
import { postgresTarget, type TargetDb } from './support/databases.js';
import { whsec } from './support/provider-deliveries.js';

const secret = whsec();
let db: TargetDb;
let payments: Inbox;
let ledger: Inbox;
let deferred: Inbox;

const charge = (id: string) => ({
  id,
  object: 'event',
  type: 'charge.succeeded',
  created: Math.floor(Date.now() / 1000),
  data: { object: { id: `ch_${id}`, object: 'charge', amount: 500 } },
});

describe.skipIf(!postgresTarget)('a failed event keeps its type', () => {
  beforeAll(async () => {
    db = await postgresTarget!.open();
    const common = { db: db.db, schema: db.schema, sweepIntervalMs: 0, logger: false as const };
    payments = createInbox({
      ...common,
      provider: stripe({ secret }),
      maxAttempts: 2,
      retryBaseMs: 1,
      handle: (event) => {
        if (event.id === 'evt_rejected') throw new RejectEvent('not a charge we sold');
        throw new Error('the ledger service is down');
      },
    });
    ledger = createInbox({
      ...common,
      source: 'ledger',
      fields: { type: '/type' },
      gapTimeoutMs: 1,
      handle: () => {},
    });
    deferred = createInbox({
      ...common,
      source: 'deferred',
      mode: 'deferred',
      workers: 0,
      fields: { type: '/type' },
      handle: () => {},
    });

    const receive = (d: { headers: Record<string, string>; body: string }) =>
      payments.receive({ headers: d.headers, rawBody: Buffer.from(d.body) });
    // Rejected on its first run.
    expect((await receive(signedDelivery('stripe', charge('evt_rejected'), { secret }))).status).toBe(422);
    // Failed on its first run, then retried from its stored row until its budget was spent.
    expect((await receive(signedDelivery('stripe', charge('evt_poison'), { secret }))).status).toBe(500);
    await new Promise((resolve) => setTimeout(resolve, 20));
    await payments.sweep();
    expect((await payments.deadLetter('evt_poison')).deadReason).toBe('poison');
    // Failed on its first run: waiting for its retry.
    expect((await receive(signedDelivery('stripe', charge('evt_waiting'), { secret }))).status).toBe(500);

    // Late: seq 1 skipped by a gap timeout, then delivered.
    const entry = (id: string, seq: number) => ({
      headers: {
        'content-type': 'application/json',
        'idempotency-key': id,
        'x-key': 'acct-1',
        'x-seq': String(seq),
      },
      rawBody: Buffer.from(JSON.stringify({ type: 'ledger.entry', amount: seq })),
    });
    expect((await ledger.receive(entry('entry-2', 2))).status).toBe(202);
    await new Promise((resolve) => setTimeout(resolve, 20));
    await ledger.sweep();
    expect((await ledger.receive(entry('entry-1', 1))).body).toMatchObject({
      status: 'dead-lettered',
      reason: 'late',
    });

    // Deferred: stored by a batch's claim, no worker to apply it.
    const stored = await deferred.receive({
      headers: { 'content-type': 'application/json', 'idempotency-key': 'queued-1' },
      rawBody: Buffer.from(JSON.stringify({ type: 'invoice.paid' })),
    });
    expect(stored.status).toBe(202);
  });
  afterAll(async () => {
    await Promise.all([payments, ledger, deferred].map((inbox) => inbox?.close()));
    await db?.close(); // drops the schema
  });

  test('rejected, poison, late: each dead letter has its type, and Operations finds them by it', async () => {
    expect((await payments.deadLetter('evt_rejected')).type).toBe('charge.succeeded');
    expect((await payments.deadLetter('evt_poison')).type).toBe('charge.succeeded');
    expect((await ledger.deadLetter('entry-1')).type).toBe('ledger.entry');
    const found = await payments.deadLetters({ type: 'charge.succeeded' });
    expect(found.map((d) => [d.id, d.deadReason]).sort()).toEqual([
      ['evt_poison', 'poison'],
      ['evt_rejected', 'rejected'],
    ]);
    expect((await ledger.deadLetters({ type: 'ledger.entry' })).map((d) => d.id)).toEqual(['entry-1']);
  });

  test('a failed run waiting for its retry, and a deferred delivery stored by its claim, have their type', async () => {
    expect((await payments.event('evt_waiting'))?.type).toBe('charge.succeeded');
    expect(await deferred.event('queued-1')).toMatchObject({ status: 'pending', type: 'invoice.paid' });
  });

  test('a replayed dead letter that fails again keeps its type', async () => {
    const [replayed] = await payments.replay('evt_poison');
    expect(replayed.outcome).toBe('requeued');
    const after = await payments.event('evt_poison');
    expect(after?.attempts).toBeGreaterThan(0);
    expect(after?.type).toBe('charge.succeeded');
  });

  test('webhook-inbox dead list --type finds them and shows a TYPE column; dead show has the type', async () => {
    const where = ['--schema', db.schema, '--source', 'stripe'];
    const list = await cli(['dead', 'list', '--type', 'charge.succeeded', '--reason', 'rejected', ...where]);
    expect(list.code).toBe(0);
    const [header, row] = list.stdout.trim().split('\n');
    expect(header).toMatch(/^SOURCE\s+ID\s+KEY\s+SEQ\s+TYPE\s+REASON/);
    expect(row).toMatch(/^stripe\s+evt_rejected\s+-\s+-\s+charge\.succeeded\s+rejected/);
    const json = await cli(['dead', 'list', '--type', 'charge.succeeded', '--json', ...where]);
    expect(json.json.map((d: { id: string }) => d.id)).toContain('evt_rejected');
    const show = await cli(['dead', 'show', 'evt_rejected', ...where]);
    expect(show.stdout).toMatch(/^type:\s+charge\.succeeded$/m);
  });

  test("the console's type filter finds them, and its lists and event page show the type", async () => {
    const app = createConsole({ inbox: payments, token: CONSOLE_TOKEN });
    const get = (url: string) =>
      app.handle({
        method: 'GET',
        url,
        headers: { authorization: `Bearer ${CONSOLE_TOKEN}`, host: 'console.test' },
      });
    const list = await get('/dead-letters?type=charge.succeeded');
    expect(list.status).toBe(200);
    expect(list.body).not.toContain('No dead letters match');
    expect(list.body).toContain('/events/stripe/evt_rejected');
    expect(list.body).toContain('<th>type</th>');
    expect(list.body).toContain('<td>charge.succeeded</td>');
    const page = await get('/events/stripe/evt_rejected');
    expect(page.body).toContain('<tr><th>type</th><td>charge.succeeded</td></tr>');
  });
});
