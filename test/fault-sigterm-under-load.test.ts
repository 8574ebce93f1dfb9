/**
 * SIGTERM under load, end to end: the ledger example (`examples/ledger/server.ts`, the way it
 * runs in production) in a process of its own, on a private PostgreSQL cluster, takes a stream
 * of ordered deliveries with slow handlers from many concurrent senders; it gets SIGTERM in
 * the middle. What must hold:
 * - no delivery it answered is a 5xx, and no request it had taken is cut: the shutdown answers
 *   what it took (the senders send their next requests to a second instance);
 * - it exits 0: its handlers finished or rolled back, its workers and sweeper stopped, and
 *   `inbox.close()` returned;
 * - every event is applied exactly once and in order, by one instance or the other.
 * Both modes: inline (the handler runs in the request) and deferred (workers apply).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { childScript } from './support/child-scripts.js';
import {
  type PrivatePostgres,
  postgresBinariesAvailable,
  startPrivatePostgres,
} from './support/private-servers.js';

const run = randomBytes(4).toString('hex');
const KEYS = 6;
const PER_KEY = 40;

/** One POST on a connection of its own (no keep-alive: a cut connection means a cut request). */
function post(
  url: string,
  headers: Record<string, string>,
  body: string,
): Promise<{ status: number; text: string }> {
  return new Promise((done, fail) => {
    const req = request(`${url}/webhooks`, { method: 'POST', headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => done({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString() }));
      res.on('error', fail);
    });
    req.on('error', fail);
    req.end(body);
  });
}

interface Sent {
  readonly id: string;
  readonly key: string;
  readonly seq: number;
}

/** Starts examples/ledger/server.ts; resolves with its URL once it listens. */
async function startServerProcess(
  env: Record<string, string>,
): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [childScript('examples/ledger/server.ts')], {
    // No REDIS_URL: the shared Redis would remember other runs' events.
    env: { ...process.env, PORT: '0', NODE_ENV: 'production', REDIS_URL: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stderr!.on('data', (c: Buffer) => {
    output += c.toString();
  });
  const url = await new Promise<string>((resolveUrl, reject) => {
    child.stdout!.on('data', (c: Buffer) => {
      output += c.toString();
      const m = /listening on (http:\/\/\S+)/.exec(output);
      if (m) {
        resolveUrl(m[1]);
      }
    });
    child.once('exit', (code) => reject(new Error(`ledger exited (${code}): ${output.slice(-2000)}`)));
  });
  return { child, url };
}

describe.skipIf(!postgresBinariesAvailable())('SIGTERM under load', () => {
  describe.each(['inline', 'deferred'] as const)('%s mode', (mode) => {
    let pg: PrivatePostgres;
    let other: LedgerServer;
    beforeAll(async () => {
      pg = await startPrivatePostgres();
      other = await startLedger({
        inbox: {
          db: pg.url,
          mode,
          workers: 2,
          pollIntervalMs: 50,
          sweepIntervalMs: 100,
          gapTimeoutMs: 600_000,
          retryBaseMs: 10,
          retryCapMs: 50,
        },
      });
    });
    afterAll(async () => {
      await other?.close();
      await pg?.destroy();
    });

    test('no 5xx from the stopping instance, exit 0, every event applied once and in order', async () => {
      const { child, url } = await startServerProcess({
        DATABASE_URL: pg.url,
        INBOX_MODE: mode,
        WORKERS: '2',
        HANDLER_DELAY_MS: '20',
        SWEEP_INTERVAL_MS: '100',
        GAP_TIMEOUT_MS: '600000',
      });
      const exited = once(child, 'exit') as Promise<[number | null, string | null]>;
      const events: Sent[] = [];
      for (let seq = 1; seq <= PER_KEY; seq++) {
        for (let k = 0; k < KEYS; k++) events.push({ id: `${run}-k${k}-s${seq}`, key: `acct-${k}`, seq });
      }
      const fromStopping: number[] = [];
      const cut: string[] = [];
      const errors: string[] = [];
      let answered = 0;
      let stoppingUp = true;
      let signalled = false;

      /** Delivers one event until a 2xx, as a sender would: the stopping instance first, then the other. */
      const deliver = async (e: Sent) => {
        for (let attempt = 0; ; attempt++) {
          const target = stoppingUp ? url : other.url;
          try {
            const { status, text } = await post(
              target,
              {
                'content-type': 'application/json',
                'idempotency-key': e.id,
                'x-key': e.key,
                'x-seq': String(e.seq),
              },
              JSON.stringify({ amount: 1 }),
            );
            if (target === url) {
              fromStopping.push(status);
              if (status >= 500) errors.push(`${status} ${text}`);
            }
            if (status < 300) {
              answered++;
              if (!signalled && answered >= (KEYS * PER_KEY) / 3) {
                signalled = true;
                child.kill('SIGTERM');
                // New requests go to the other instance from now on: once the stopping one has
                // exited, its port may be taken by another test file's server. The requests
                // in flight to it are what the shutdown must answer.
                stoppingUp = false;
              }
              return;
            }
          } catch (err) {
            // Refused, or reset while still in the listen backlog (the kernel resets what the
            // server never accepted): this instance is gone; the sender goes on to the other.
            // A hang-up is different: the server closed a connection carrying a request it
            // had taken, without answering it.
            if (target === url) {
              stoppingUp = false;
              const code = (err as NodeJS.ErrnoException).code;
              if (code !== 'ECONNREFUSED' && code !== 'ECONNRESET') cut.push(String(err));
            }
          }
          // 409 (the key is busy), 429 (its buffer), 503 from the other one: retry shortly.
          await sleep(Math.min(200, 10 * (attempt + 1)));
        }
      };
      // 12 senders at once, each taking the next event in line.
      let next = 0;
      await Promise.all(
        Array.from({ length: 12 }, async () => {
          while (next < events.length) await deliver(events[next++]);
        }),
      );
      const [code] = await exited;
      expect(code).toBe(0);
      expect(signalled).toBe(true);
      expect(errors).toEqual([]);
      expect(cut).toEqual([]);
      expect(fromStopping.length).toBeGreaterThan(0);

      // Deferred (and held) events are applied by the other instance's workers and sweeper.
      const db = await other.inbox.kysely();
      const state = async () =>
        JSON.stringify(
          (await sql`select status, count(*)::int as n from webhook_inbox.events group by 1`.execute(db))
            .rows,
        );
      await vi
        .waitFor(
          async () => {
            for (let k = 0; k < KEYS; k++) {
              expect((await other.ledger.account(db, `acct-${k}`)).entries.length).toBe(PER_KEY);
            }
          },
          { timeout: 60_000, interval: 200 },
        )
        .catch(async (err) => {
          throw new Error(`not every event was applied; inbox rows: ${await state()}`, { cause: err });
        });
      for (let k = 0; k < KEYS; k++) {
        const account = await other.ledger.account(db, `acct-${k}`);
        expect(account.balance).toBe(PER_KEY);
        expect(account.entries.map((e) => e.seq)).toEqual(Array.from({ length: PER_KEY }, (_, i) => i + 1));
        expect(new Set(account.entries.map((e) => e.id)).size).toBe(PER_KEY);
      }
    }, 120_000);
  });
});
