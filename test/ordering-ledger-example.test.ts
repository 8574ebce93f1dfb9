/**
 * The ledger example (`npm run example`) takes its gap timeout and sweeper interval from the
 * environment: GAP_TIMEOUT_MS and SWEEP_INTERVAL_MS; and the modes it documents: latest-wins
 * (PROVIDER=stripe ORDER=latest) and deferred (INBOX_MODE=deferred, for /webhooks and
 * /webhooks/ingest). Runs the real server script in a process of its own, on embedded PGlite,
 * port 0.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { signedDelivery } from '../src/testing/index.js';
import { childScript } from './support/child-scripts.js';
import { postOrdered } from './support/ordering.js';

/** Starting a process (tsx, and PGlite for the example) takes seconds on a busy 2-core box. */
const SLOW = 180_000;

const children = new Set<ChildProcess>();

function runExample(env: Record<string, string>) {
  // A fresh embedded database each run: no DATABASE_URL, and no REDIS_URL either (a Redis
  // shared across runs would remember the previous run's events, as a cache of another database).
  const { DATABASE_URL: _db, REDIS_URL: _redis, ...inherited } = process.env;
  const child = spawn(process.execPath, [childScript('examples/ledger/server.ts')], {
    env: { ...inherited, PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
  });
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const listening = new Promise<string>((resolve, reject) => {
    child.stdout.on('data', () => {
      const match = /ledger listening on (http:\/\/\S+)/.exec(stdout);
      if (match) resolve(match[1]);
    });
    exited.then((code) => reject(new Error(`the example exited (${code}): ${stderr}`)));
  });
  listening.catch(() => {}); // awaited by the tests that expect it to listen
  return { child, listening, exited, stderr: () => stderr };
}

afterEach(async () => {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await gone;
    }
  }
  children.clear();
});

describe('the ledger example honours GAP_TIMEOUT_MS and SWEEP_INTERVAL_MS', { timeout: SLOW }, () => {
  it('skips a gap after GAP_TIMEOUT_MS, by its own sweeper every SWEEP_INTERVAL_MS', async () => {
    const example = runExample({ GAP_TIMEOUT_MS: '50', SWEEP_INTERVAL_MS: '10' });
    const url = await example.listening;
    const reply = await postOrdered(`${url}/webhooks`, 'acct', 2);
    expect(reply.body).toEqual({ status: 'held', id: 'acct:2', key: 'acct', seq: 2, expected: 1 });
    // With the defaults (30 s, every 1 s) nothing would happen for 30 s: wait for at most 15.
    const deadline = Date.now() + 15_000;
    let account: any;
    do {
      await new Promise((resolve) => setTimeout(resolve, 25));
      account = await (await fetch(`${url}/accounts/acct`)).json();
    } while (account.entries.length === 0 && Date.now() < deadline);
    expect(account).toEqual({ key: 'acct', balance: 2, entries: [{ id: 'acct:2', seq: 2, amount: 2 }] });
    // Seq 1, late now, is dead-lettered and not applied.
    const late = await postOrdered(`${url}/webhooks`, 'acct', 1);
    expect(late.body).toEqual({ status: 'dead-lettered', id: 'acct:1', reason: 'late' });
    expect(((await (await fetch(`${url}/accounts/acct`)).json()) as any).balance).toBe(2);
  });

  it('refuses a malformed GAP_TIMEOUT_MS, naming it', async () => {
    const example = runExample({ GAP_TIMEOUT_MS: 'soon' });
    expect(await example.exited).toBe(2);
    expect(example.stderr()).toContain('GAP_TIMEOUT_MS must be a non-negative integer; got "soon"');
  });

  it('refuses a SWEEP_INTERVAL_MS out of range, naming the option', async () => {
    const example = runExample({ SWEEP_INTERVAL_MS: '999999999' });
    expect(await example.exited).toBe(1);
    expect(example.stderr()).toContain('sweepIntervalMs');
  });
});

describe('the ledger example in the other modes it documents', { timeout: SLOW }, () => {
  const secret = 'whsec_dGVzdHNlY3JldA';
  const stripeEvent = (url: string, id: string, created: number, amount: number) => {
    const { headers, body } = signedDelivery(
      'stripe',
      {
        id,
        object: 'event',
        type: 'payment_intent.succeeded',
        created,
        data: { object: { id: 'pi_1', object: 'payment_intent', amount } },
      },
      { secret },
    );
    return fetch(`${url}/webhooks`, { method: 'POST', headers, body }).then(async (res) => ({
      status: res.status,
      body: (await res.json()) as any,
    }));
  };

  it('PROVIDER=stripe ORDER=latest: a newer version is applied, an older one answered superseded', async () => {
    const example = runExample({ PROVIDER: 'stripe', WEBHOOK_SECRET: secret, ORDER: 'latest' });
    const url = await example.listening;
    expect(await stripeEvent(url, 'evt_new', 200, 700)).toEqual({
      status: 200,
      body: expect.objectContaining({ status: 'processed', id: 'evt_new' }),
    });
    expect(await stripeEvent(url, 'evt_old', 100, 500)).toEqual({
      status: 200,
      body: { status: 'superseded', id: 'evt_old', key: 'pi_1', version: 100, latest: 200 },
    });
    expect(await (await fetch(`${url}/accounts/pi_1`)).json()).toEqual({
      key: 'pi_1',
      balance: 700,
      entries: [{ id: 'evt_new', seq: null, amount: 700 }],
    });
  });

  it('INBOX_MODE=deferred: /webhooks and /webhooks/ingest answer 202, and the workers apply both', async () => {
    const example = runExample({ INBOX_MODE: 'deferred' });
    const url = await example.listening;
    const post = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
      const res = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as any };
    };
    expect(await post('/webhooks', { amount: 5 }, { 'idempotency-key': 'd1' })).toEqual({
      status: 202,
      body: { status: 'pending', id: 'd1' },
    });
    for (const seq of [2, 1]) {
      expect(await post('/webhooks/ingest', { sequence_id: seq, data: 'x' })).toEqual({
        status: 202,
        body: { status: 'buffered' },
      });
    }
    const deadline = Date.now() + 30_000;
    let done = false;
    while (!done && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      const account = (await (await fetch(`${url}/accounts/none`)).json()) as any;
      const verify = (await (await fetch(`${url}/ledger/verify`)).json()) as any;
      done = account.balance === 5 && verify.applied === 2;
    }
    expect(await (await fetch(`${url}/accounts/none`)).json()).toMatchObject({ balance: 5 });
    expect(await (await fetch(`${url}/ledger/verify`)).json()).toEqual({
      reconciled: true,
      applied: 2,
      buffered: 0,
      skipped: 0,
    });
    expect(await (await fetch(`${url}/accounts/ingest`)).json()).toMatchObject({
      entries: [
        { id: 'ingest:1', seq: 1 },
        { id: 'ingest:2', seq: 2 },
      ],
    });
  });
});
