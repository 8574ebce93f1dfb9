/**
 * Without `db`, the inbox would keep everything in memory and lose it on restart. In production
 * that is refused; elsewhere it runs and says so, once. `db: 'memory'` and `dataDir` are choices
 * made knowingly: silent. The ledger example refuses to start in production without DATABASE_URL.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { createInbox, type InboxOptions, InboxOptionsError } from '../src/index.js';
import { childScript } from './support/child-scripts.js';

const run = promisify(execFile);
const handle = () => ({ ok: true });
const delivery = (id: string) => ({
  headers: { 'idempotency-key': id, 'content-type': 'application/json' },
  rawBody: Buffer.from('{"n":1}'),
});

/** Process warnings and logger warnings seen while a test runs. */
let processWarnings: string[];
const onWarning = (w: Error) => processWarnings.push(`${w.name}: ${w.message}`);
const nodeEnv = process.env.NODE_ENV;
beforeEach(() => {
  processWarnings = [];
  process.on('warning', onWarning);
});
afterEach(() => {
  process.off('warning', onWarning);
  process.env.NODE_ENV = nodeEnv;
});
/** Warnings are emitted on the next tick. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

function recordingLogger() {
  const warned: string[] = [];
  return { warned, logger: { warn: (_obj: object, msg?: string) => warned.push(msg ?? '') } };
}

describe('NODE_ENV=production with no `db`', () => {
  test('createInbox refuses: InboxOptionsError naming `db`, saying how to opt in', () => {
    process.env.NODE_ENV = 'production';
    let error: unknown;
    try {
      createInbox({ handle });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(InboxOptionsError);
    expect((error as InboxOptionsError).option).toBe('db');
    expect((error as Error).message).toMatch(/option `db` is required when NODE_ENV=production/);
    expect((error as Error).message).toMatch(/db: 'memory'/);
    expect((error as Error).message).toMatch(/DATABASE_URL/);
  });

  test("db: 'memory' is an explicit choice: accepted in production too", async () => {
    process.env.NODE_ENV = 'production';
    const inbox = createInbox({ handle, db: 'memory', sweepIntervalMs: 0 });
    try {
      expect((await inbox.receive(delivery('prod-memory-1'))).status).toBe(200);
    } finally {
      await inbox.close();
    }
  });
});

describe('elsewhere, with no `db`', () => {
  test('it runs in memory, warns once per process and once to each logger', async () => {
    process.env.NODE_ENV = 'development';
    const first = recordingLogger();
    const second = recordingLogger();
    const a = createInbox({ handle, sweepIntervalMs: 0, logger: first.logger });
    const b = createInbox({ handle, sweepIntervalMs: 0, logger: second.logger });
    try {
      expect((await a.receive(delivery('dev-1'))).status).toBe(200);
      await settle();
      const inMemory = processWarnings.filter((w) => /kept in an in-memory database/.test(w));
      expect(inMemory).toHaveLength(1);
      expect(inMemory[0]).toMatch(/^WebhookInboxWarning: .*db: 'memory'/);
      expect(first.warned).toEqual([
        expect.stringMatching(/no `db` option: events are kept in an in-memory/),
      ]);
      expect(second.warned).toHaveLength(1);
    } finally {
      await a.close();
      await b.close();
    }
  });

  test("db: 'memory' is silent, and serves deliveries (a duplicate gets the stored result)", async () => {
    const { warned, logger } = recordingLogger();
    const inbox = createInbox({ handle, db: 'memory', sweepIntervalMs: 0, logger });
    try {
      expect((await inbox.receive(delivery('mem-1'))).body).toMatchObject({ status: 'processed' });
      expect((await inbox.receive(delivery('mem-1'))).body).toMatchObject({ status: 'duplicate' });
      await settle();
      expect(warned).toEqual([]);
      expect(processWarnings.filter((w) => /in-memory/.test(w))).toEqual([]);
    } finally {
      await inbox.close();
    }
  });

  test('dataDir is silent, accepted in production too, and keeps the dedup record across a restart', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'webhook-inbox-datadir-'));
    const { warned, logger } = recordingLogger();
    const options: InboxOptions = { handle, dataDir, sweepIntervalMs: 0, logger };
    try {
      // Stored by an instance in production, read back by one elsewhere: one database on disk.
      process.env.NODE_ENV = 'production';
      const before = createInbox(options);
      expect((await before.receive(delivery('disk-1'))).body).toMatchObject({ status: 'processed' });
      await before.close();
      process.env.NODE_ENV = nodeEnv;
      const after = createInbox(options);
      expect((await after.receive(delivery('disk-1'))).body).toMatchObject({
        status: 'duplicate',
        result: { ok: true },
      });
      await after.close();
      expect(warned).toEqual([]);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);

  test("db: 'memory' with dataDir is a contradiction, named", () => {
    expect(() => createInbox({ handle, db: 'memory', dataDir: '/tmp/x' })).toThrow(/option `dataDir`/);
  });
});

describe('the ledger example', () => {
  test('with NODE_ENV=production and no DATABASE_URL it exits non-zero, naming DATABASE_URL', async () => {
    const { DATABASE_URL: _db, REDIS_URL: _redis, ...inherited } = process.env;
    const result = await run(process.execPath, [childScript('examples/ledger/server.ts')], {
      env: { ...inherited, NODE_ENV: 'production', PORT: '0' },
      timeout: 120_000,
    }).then(
      () => ({ code: 0, stderr: '', stdout: '' }),
      (err) => err as { code: number; stderr: string; stdout: string },
    );
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/DATABASE_URL is not set/);
    expect(result.stdout).not.toMatch(/listening/);
  }, 150_000);
});
