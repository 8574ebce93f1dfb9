/**
 * The ledger example (`npm run example`) takes its gap timeout and sweeper interval from the
 * environment: GAP_TIMEOUT_MS and SWEEP_INTERVAL_MS. Runs the real server script in a process
 * of its own, on embedded PGlite, port 0.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
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
