/**
 * PostgreSQL restarted mid-stream, end to end: a private, throwaway cluster (never the shared
 * server) under the ledger example, restarted (`pg_ctl restart -m fast`: every connection is
 * terminated) while senders deliver ordered events. The same process carries on, with no
 * restart of its own: deliveries during the outage are answered 503 (or 409) and retried by
 * their senders, the pool reconnects, deferred mode's workers and listener come back, and
 * every event is applied exactly once, in order.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import {
  type PrivatePostgres,
  postgresBinariesAvailable,
  startPrivatePostgres,
} from './support/private-servers.js';

const KEYS = 5;
const PER_KEY = 40;

describe.skipIf(!postgresBinariesAvailable())('PostgreSQL restarted mid-stream', () => {
  describe.each(['inline', 'deferred'] as const)('%s mode', (mode) => {
    let pg: PrivatePostgres;
    let app: LedgerServer;
    beforeAll(async () => {
      pg = await startPrivatePostgres();
      app = await startLedger({
        inbox: {
          db: pg.url,
          mode,
          workers: 2,
          pollIntervalMs: 50,
          sweepIntervalMs: 100,
          gapTimeoutMs: 600_000,
          retryBaseMs: 10,
          retryCapMs: 100,
          lockTimeoutMs: 1000,
        },
      });
    });
    afterAll(async () => {
      await app?.close();
      await pg?.destroy();
    });

    test('every event applied once, in order, by the same process', async () => {
      const statuses = new Map<number, number>();
      let answered = 0;
      let restarted: Promise<void> | undefined;
      const deliver = async (key: string, seq: number) => {
        for (let attempt = 0; ; attempt++) {
          try {
            const res = await fetch(`${app.url}/webhooks`, {
              method: 'POST',
              headers: {
                'content-type': 'application/json',
                'idempotency-key': `${key}-${seq}`,
                'x-key': key,
                'x-seq': String(seq),
              },
              body: JSON.stringify({ amount: 1 }),
            });
            await res.arrayBuffer();
            statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
            if (res.status < 300) {
              answered++;
              if (!restarted && answered >= (KEYS * PER_KEY) / 3) restarted = pg.restart();
              return;
            }
          } catch (err) {
            throw new Error(`the app stopped answering: ${err}`);
          }
          await sleep(Math.min(200, 10 * (attempt + 1)));
        }
      };
      // One sender per key, in seq order, as an ordered sender would; all keys at once.
      await Promise.all(
        Array.from({ length: KEYS }, async (_, k) => {
          for (let seq = 1; seq <= PER_KEY; seq++) await deliver(`acct-${k}`, seq);
        }),
      );
      await restarted;
      // The restart hit the stream: some deliveries found no database and were retried.
      expect(statuses.get(503) ?? 0).toBeGreaterThan(0);
      // Only outcomes a sender retries (503, 409) were seen besides 2xx: never a 500 or a 4xx.
      const others = [...statuses.keys()].filter((s) => s >= 300 && s !== 503 && s !== 409);
      expect(others).toEqual([]);

      const db = await app.inbox.kysely();
      await vi.waitFor(
        async () => {
          for (let k = 0; k < KEYS; k++) {
            expect((await app.ledger.account(db, `acct-${k}`)).entries.length).toBe(PER_KEY);
          }
        },
        { timeout: 60_000, interval: 200 },
      );
      for (let k = 0; k < KEYS; k++) {
        const account = await app.ledger.account(db, `acct-${k}`);
        expect(account.balance).toBe(PER_KEY);
        expect(account.entries.map((e) => e.seq)).toEqual(Array.from({ length: PER_KEY }, (_, i) => i + 1));
      }
      // And it keeps working: a new event after the restart is applied (or stored) at once.
      const res = await fetch(`${app.url}/webhooks`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'after-restart' },
        body: JSON.stringify({ amount: 1 }),
      });
      expect(res.status).toBeLessThan(300);
    }, 120_000);
  });
});
