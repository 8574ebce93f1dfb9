import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { type AttemptReport, createSender } from '../src/sender/index.js';
import { postgresTarget } from './support/databases.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => {});
});

/** Our own inbox behind a plain HTTP server: every request goes through `inbox.receive`. */
async function serve(inbox: Inbox): Promise<string> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k] = v;
      const outcome = await inbox.receive({ headers, rawBody: Buffer.concat(chunks) });
      res.writeHead(outcome.status, outcome.headers);
      res.end(JSON.stringify(outcome.body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`;
}

// Two deliveries must sit in their handlers at once, two transactions: PostgreSQL only (PGlite
// has one session, so the second waits for the first and the window never opens).
describe.skipIf(!postgresTarget)(
  'the sender against our own inbox shedding load (503 Retry-After: 1)',
  () => {
    it('keeps every event through the shedding window and delivers them all afterwards, in order, none dead-lettered', async () => {
      const t = await postgresTarget!.open();
      cleanups.push(() => t.close());
      let openGate: () => void = () => {};
      const gate = new Promise<void>((resolve) => {
        openGate = resolve;
      });
      let inGate = 0;
      let bothInGate: () => void = () => {};
      const slotsTaken = new Promise<void>((resolve) => {
        bothInGate = resolve;
      });
      const applied: Array<[string, number]> = [];
      // Two deliveries sit in the handler until the gate opens; with maxInFlight 2 the inbox
      // answers every other delivery 503 Retry-After: 1 meanwhile (it sheds before the database).
      const inbox = createInbox({
        db: t.db,
        schema: t.schema,
        maxInFlight: 2,
        sweepIntervalMs: 0,
        handle: async (e) => {
          if (e.key!.startsWith('gate')) {
            if (++inGate === 2) bothInGate();
            await gate;
          }
          applied.push([e.key!, e.seq!]);
        },
      });
      cleanups.push(() => inbox.close());
      await inbox.ready();
      const url = await serve(inbox);

      // Why not 30 s of shedding: the old sender dead-lettered after a fixed number of attempts
      // whatever the consumer said (8 by default, 7 s at Retry-After: 1). With maxAttempts: 3, a
      // window that lasts until every waiting head has been answered 503 at least 4 times shows
      // the same thing, that "later" answers spend no attempt budget, in about 5 s instead of 30.
      const sender = createSender({ endpoint: url, concurrency: 16, maxAttempts: 3, baseMs: 50 });
      cleanups.push(() => sender.close());
      const shedPerHead = new Map<string, number>();
      let deadLettered = 0;
      const sheddingLongEnough = () =>
        shedPerHead.size === 10 && [...shedPerHead.values()].every((n) => n >= 4);
      const retries: AttemptReport[] = [];
      sender.on('retry', (r: AttemptReport) => {
        retries.push(r);
        if (r.seq === 1) shedPerHead.set(r.key!, (shedPerHead.get(r.key!) ?? 0) + 1);
        if (sheddingLongEnough()) openGate();
      });
      sender.on('dead-lettered', () => {
        deadLettered++;
        openGate(); // the old sender: fail fast rather than wait for a window that cannot end
      });

      const sends = [sender.send({ key: 'gate-a', body: {} }), sender.send({ key: 'gate-b', body: {} })];
      // The gate events take the inbox's two slots before the others are sent.
      await slotsTaken;
      const keys = Array.from({ length: 10 }, (_, k) => `acct-${k}`);
      for (let n = 1; n <= 5; n++) for (const key of keys) sends.push(sender.send({ key, body: { n } }));
      const results = await Promise.all(sends);

      expect(deadLettered).toBe(0);
      expect(results.filter((r) => r.status !== 'delivered')).toEqual([]);
      expect(sheddingLongEnough()).toBe(true);
      // Every retry was the inbox shedding: waited at least its Retry-After, spent no attempt.
      for (const r of retries) {
        expect(r).toMatchObject({ status: 503, retryAfter: true, counted: false });
        expect(r.delayMs).toBeGreaterThanOrEqual(1000);
      }
      await sender.idle();
      expect(await sender.deadLetters()).toEqual([]);
      for (const key of keys) {
        expect(applied.filter(([k]) => k === key).map(([, seq]) => seq)).toEqual([1, 2, 3, 4, 5]);
      }
      expect(applied).toHaveLength(52);
    }, 120_000);
  },
);
