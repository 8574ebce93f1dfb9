/**
 * What the CLI prints came from senders and handlers, and an operator reads it on a terminal:
 * escape sequences in a payload, a header, an id, a key or an error text must reach the
 * screen escaped, never raw. `dead show --raw` is the one way to get the
 * bytes as they were. Real PostgreSQL; the CLI runs as its own process.
 */
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { cliProcess } from './support/cli.js';
import { postgresTarget, type TargetDb } from './support/databases.js';
import { perTestSchemas } from './support/per-test-schemas.js';

const { cli } = cliProcess();

/** Clear the screen, write the clipboard (OSC 52), set the title, hide text, CSI as one C1 byte, DEL, bidi override. */
const HOSTILE = '\x1b[2J\x1b]52;c;cHduZWQ=\x07\x1b]0;owned\x07\x1b[8m\u009b31m\x7f\u202e';
/** Anything a terminal acts on, apart from line feed and tab. */
const RAW_CONTROL = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]/;

describe.skipIf(!postgresTarget)('CLI output is safe on a terminal (postgres)', { timeout: 180_000 }, () => {
  const database = perTestSchemas(postgresTarget!);
  let t: TargetDb;
  let inbox: Inbox | undefined;
  beforeEach(() => {
    t = database();
  });
  afterEach(async () => {
    await inbox?.close();
    inbox = undefined;
  });

  it('escapes control characters in payloads, headers, ids, keys and errors; --raw writes the bytes', async () => {
    const payload = Buffer.concat([
      Buffer.from(`{"note":"${HOSTILE}"}\n\tsecond line\r`),
      Buffer.from([0xff, 0xfe, 0x1b, 0x5b, 0x33, 0x31, 0x6d]),
    ]);
    const utf8Payload = Buffer.from(`line one ${HOSTILE}\n\tline two`);
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      maxAttempts: 1,
      parse: 'raw',
      handle: () => {
        throw new Error(`boom ${HOSTILE}\r\nstatus: processed`);
      },
    });
    const headers = { 'x-key': 'acct-1', 'x-seq': '1', 'x-note': `n${HOSTILE}` };
    await inbox.receive({ headers: { ...headers, 'idempotency-key': 'evt-1' }, rawBody: payload });
    await inbox.receive({ headers: { 'idempotency-key': 'evt-2' }, rawBody: utf8Payload });
    // An id and a key with escapes in them, as a sender whose ids come from its body could store.
    const id = `evt${HOSTILE}-1`;
    const key = `acct${HOSTILE}`;
    const db = await inbox.kysely();
    await sql`update ${sql.table(`${t.schema}.events`)} set id = ${id}, key = ${key}, stream = ${key} where id = 'evt-1'`.execute(
      db,
    );
    await sql`update ${sql.table(`${t.schema}.keys`)} set key = ${key}, stream = ${key} where key = 'acct-1'`.execute(
      db,
    );
    await inbox.close();
    inbox = undefined;

    const S = ['--schema', t.schema];
    const runs = await Promise.all([
      cli(['dead', 'list', ...S]),
      cli(['dead', 'show', id, ...S]),
      cli(['dead', 'show', 'evt-2', ...S]),
      cli(['keys', 'list', ...S]),
      cli(['keys', 'show', key, ...S]),
      cli(['dead', 'list', '--json', ...S]),
      cli(['dead', 'show', id, '--json', ...S]),
      cli(['keys', 'show', key, '--json', ...S]),
      cli(['dead', 'show', `nope${HOSTILE}`, ...S]),
      cli(['dead', 'show', `nope${HOSTILE}`, '--json', ...S]),
      cli(['dead', 'replay', '--dry-run', id, ...S]),
      cli(['status', '--source', `s\u009b`, ...S]),
    ]);
    for (const [i, r] of runs.entries()) {
      expect(RAW_CONTROL.test(r.stdout), `stdout of run ${i}: ${JSON.stringify(r.stdout)}`).toBe(false);
      expect(RAW_CONTROL.test(r.stderr), `stderr of run ${i}: ${JSON.stringify(r.stderr)}`).toBe(false);
    }
    const [
      list,
      show,
      showUtf8,
      keys,
      keyShow,
      listJson,
      showJson,
      keyJson,
      missing,
      missingJson,
      dry,
      badSource,
    ] = runs;
    expect(runs.slice(0, 8).map((r) => r.code)).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);

    // Text: the escapes are visible as escapes, where they were.
    expect(list.stdout).toContain('evt\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07');
    expect(list.stdout).toContain('boom \\x1b[2J');
    expect(show.stdout).toMatch(
      /^id: +evt\\x1b\[2J\\x1b\]52;c;cHduZWQ=\\x07\\x1b\]0;owned\\x07\\x1b\[8m\\x9b31m\\x7f\\u\{202e\}-1$/m,
    );
    expect(show.stdout).toMatch(/^last error: +(Error: )?boom \\x1b\[2J.*\\r\\nstatus: processed$/m);
    expect(show.stdout).toMatch(/^ {2}x-note: n\\x1b\[2J/m);
    expect(show.stdout).toContain('payload (base64)');
    expect(showUtf8.stdout).toContain(`line one \\x1b[2J\\x1b]52;c;cHduZWQ=\\x07`);
    expect(showUtf8.stdout).toContain('\n\tline two'); // a payload keeps its lines and tabs
    expect(keys.stdout).toContain('acct\\x1b[2J');
    expect(keyShow.stdout).toContain('acct\\x1b[2J');
    expect(keyShow.stdout).toContain('evt\\x1b[2J');

    // JSON: safe on a terminal too, and it parses back to exactly what was stored.
    expect(listJson.json.map((d: any) => d.id).sort()).toEqual([id, 'evt-2'].sort());
    expect(listJson.json.find((d: any) => d.id === id).lastError).toContain(
      `boom ${HOSTILE}\r\nstatus: processed`,
    );
    expect(showJson.json).toMatchObject({
      id,
      key,
      payloadEncoding: 'base64',
      payload: payload.toString('base64'),
    });
    expect(showJson.json.headers['x-note']).toBe(`n${HOSTILE}`);
    expect(keyJson.json).toMatchObject({ key, deadLetters: [{ id }] });

    // Errors name the id escaped, in text and in JSON.
    expect(missing.code).toBe(3);
    expect(missing.stderr).toContain('nope\\u001b[2J'); // JSON.stringify's escape, in the library's message
    expect(missingJson.code).toBe(3);
    expect(JSON.parse(missingJson.stderr).error.message).toContain(JSON.stringify(`nope${HOSTILE}`));
    expect(dry.stdout).toContain('evt\\x1b[2J');
    expect(badSource.code).toBe(2);

    // --raw: the payload bytes exactly as received, nothing added.
    const [raw, rawUtf8, rawJson] = await Promise.all([
      cli(['dead', 'show', id, '--raw', ...S]),
      cli(['dead', 'show', 'evt-2', '--raw', ...S]),
      cli(['dead', 'show', id, '--raw', '--json', ...S]),
    ]);
    expect(raw.code).toBe(0);
    expect(raw.bytes.equals(payload)).toBe(true);
    expect(rawUtf8.bytes.equals(utf8Payload)).toBe(true);
    expect(rawJson.code).toBe(2);
    expect(JSON.parse(rawJson.stderr).error.message).toContain('--raw or --json');
  });
});
