/**
 * `webhook-inbox console`: serves the console over the inbox tables until stopped; refuses to
 * start without a token (from the environment) unless --insecure on a loopback address.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { CliIo } from '../src/cli/command.js';
import { main } from '../src/cli/main.js';
import { CONSOLE_TOKEN } from './support/console.js';
import { postgresUrl, uniqueName } from './support/databases.js';

const schema = uniqueName('wi');
const db = postgresUrl;

function io(untilStopped?: () => Promise<void>) {
  const out: string[] = [];
  const err: string[] = [];
  const value: CliIo = {
    stdout: (t) => out.push(t),
    stderr: (t) => err.push(t),
    raw: () => {},
    untilStopped,
  };
  return { out, err, io: value };
}

beforeAll(async () => {
  if (db) expect(await main(['migrate', '--db', db, '--schema', schema], {}, io().io)).toBe(0);
});
afterAll(async () => {
  if (db) {
    const pg = (await import('pg')).default;
    const client = new pg.Client({ connectionString: db });
    await client.connect();
    await client.query(`drop schema if exists "${schema}" cascade`);
    await client.end();
  }
});

test('without a token it refuses to start, naming the variable; --insecure only on loopback', async () => {
  const a = io();
  expect(await main(['console', '--db', 'postgres://127.0.0.1/x'], {}, a.io)).toBe(2);
  expect(a.err.join('\n')).toContain('WEBHOOK_INBOX_CONSOLE_TOKEN');
  const b = io();
  expect(
    await main(['console', '--db', 'postgres://127.0.0.1/x', '--insecure', '--host', '0.0.0.0'], {}, b.io),
  ).toBe(2);
  expect(b.err.join('\n')).toContain('loopback');
  const c = io();
  expect(
    await main(
      ['console', '--db', 'postgres://127.0.0.1/x', '--port', '70000'],
      { WEBHOOK_INBOX_CONSOLE_TOKEN: CONSOLE_TOKEN },
      c.io,
    ),
  ).toBe(2);
  expect(c.err.join('\n')).toContain('--port');
  const d = io();
  expect(
    await main(
      ['console', '--db', 'postgres://127.0.0.1/x', '--allowed-hosts', 'https://ops.example'],
      { WEBHOOK_INBOX_CONSOLE_TOKEN: CONSOLE_TOKEN },
      d.io,
    ),
  ).toBe(2);
  expect(d.err.join('\n')).toContain('--allowed-hosts');
});

test.skipIf(!db)(
  'serves the console until stopped: 401 without the token, the overview with it',
  async () => {
    let stop!: () => void;
    const stopped = new Promise<void>((resolve) => {
      stop = resolve;
    });
    let listening!: (url: string) => void;
    const url = new Promise<string>((resolve) => {
      listening = resolve;
    });
    const { io: cliIo, out } = io(() => {
      listening(/on (http:\S+?)\/?(\s|$)/.exec(out.join('\n'))![1]!);
      return stopped;
    });
    const exit = main(
      ['console', '--db', db!, '--schema', schema, '--port', '0'],
      { WEBHOOK_INBOX_CONSOLE_TOKEN: CONSOLE_TOKEN },
      cliIo,
    );
    const base = await url;
    expect((await fetch(`${base}/`)).status).toBe(401);
    const page = await fetch(`${base}/`, { headers: { authorization: `Bearer ${CONSOLE_TOKEN}` } });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('Overview');
    stop();
    expect(await exit).toBe(0);
  },
);
