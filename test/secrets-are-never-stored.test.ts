/**
 * A header that carries a secret (GitLab's `X-Gitlab-Token` is the shared secret itself; a
 * signature stands for one) is never stored with an event, never shown by the console or by
 * `webhook-inbox dead show`, and `webhook-inbox scrub-headers` removes it from rows an earlier
 * version stored. Real PostgreSQL: the CLI runs as its own process against the same database.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createConsole } from '../src/console/index.js';
import { gitlab } from '../src/delivery/providers.js';
import { createInbox, headerToken, type Inbox, InboxOptionsError } from '../src/index.js';
import { cliProcess } from './support/cli.js';
import { CONSOLE_TOKEN } from './support/console.js';
import { postgresTarget, type TargetDb } from './support/databases.js';
import { perTestSchemas } from './support/per-test-schemas.js';

const { cli } = cliProcess();
const TOKEN = `glpat-${randomUUID()}`;

describe.skipIf(!postgresTarget)('secret headers (postgres)', { timeout: 60_000 }, () => {
  const database = perTestSchemas(postgresTarget!);
  let t: TargetDb;
  let inbox: Inbox;
  beforeEach(() => {
    t = database();
  });
  afterEach(async () => {
    await inbox?.close();
  });

  const failing = (extra: object = {}) =>
    createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      maxAttempts: 1,
      provider: gitlab({ secret: TOKEN }),
      handle: () => {
        throw new Error('handler down');
      },
      ...extra,
    });

  const gitlabDelivery = (id: string, extra: Record<string, string> = {}) => ({
    headers: {
      'content-type': 'application/json',
      'idempotency-key': id,
      'x-gitlab-event': 'Push Hook',
      'x-gitlab-token': TOKEN,
      ...extra,
    },
    rawBody: Buffer.from('{"object_kind":"push"}'),
  });

  async function storedHeaders(id: string): Promise<Record<string, string>> {
    const { rows } = await sql<{ headers: Record<string, string> }>`
      select headers from ${sql.id(t.schema, 'events')} where id = ${id}`.execute(await inbox.kysely());
    expect(rows).toHaveLength(1);
    return rows[0]!.headers;
  }

  async function consoleEventPage(id: string): Promise<string> {
    const app = createConsole({ inbox, token: CONSOLE_TOKEN });
    const res = await app.handle({
      method: 'GET',
      // A preset names the source after its provider.
      url: `/events/gitlab/${id}`,
      headers: { authorization: `Bearer ${CONSOLE_TOKEN}` },
    });
    expect(res.status).toBe(200);
    return res.body;
  }

  const deadShow = (id: string) => cli(['dead', 'show', id, '--schema', t.schema]);

  it('a GitLab delivery whose handler throws leaves its token nowhere: not in the row, the console or dead show', async () => {
    inbox = failing();
    const id = randomUUID();
    expect((await inbox.receive(gitlabDelivery(id))).status).toBe(200); // dead-lettered at once
    const headers = await storedHeaders(id);
    expect(headers['x-gitlab-event']).toBe('Push Hook'); // the other headers are kept
    expect(headers).not.toHaveProperty('x-gitlab-token');

    const page = await consoleEventPage(id);
    expect(page).toContain('x-gitlab-event');
    expect(page).not.toContain('x-gitlab-token');
    expect(page).not.toContain(TOKEN);
    const shown = await deadShow(id);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain('x-gitlab-event');
    expect(shown.stdout).not.toContain(TOKEN);
  });

  it('a row stored before is not shown with its token, and scrub-headers removes it', async () => {
    inbox = failing();
    const id = randomUUID();
    await inbox.receive(gitlabDelivery(id));
    // What an earlier version stored: the token among the headers.
    await sql`update ${sql.id(t.schema, 'events')}
                 set headers = headers || jsonb_build_object('x-gitlab-token', ${TOKEN}::text, 'x-site-key', 'k-1')
               where id = ${id}`.execute(await inbox.kysely());

    expect(await consoleEventPage(id)).not.toContain(TOKEN);
    expect((await deadShow(id)).stdout).not.toContain(TOKEN);
    // A header the operator names is hidden by the CLI too.
    const named = await cli([
      'dead',
      'show',
      id,
      '--schema',
      t.schema,
      '--secret-headers',
      'X-Site-Key',
      '--json',
    ]);
    expect(Object.keys(named.json.headers)).toEqual(expect.arrayContaining(['x-gitlab-event']));
    expect(named.json.headers).not.toHaveProperty('x-site-key');

    const dry = await cli(['scrub-headers', '--schema', t.schema, '--dry-run', '--json']);
    expect(dry.json).toMatchObject({ scrubbed: 1, dryRun: true });
    expect(await storedHeaders(id)).toHaveProperty('x-gitlab-token', TOKEN);

    const scrubbed = await cli([
      'scrub-headers',
      '--schema',
      t.schema,
      '--secret-headers',
      'x-site-key',
      '--json',
    ]);
    expect(scrubbed.code, scrubbed.stderr).toBe(0);
    expect(scrubbed.json).toMatchObject({ scrubbed: 1, remaining: 0, dryRun: false });
    const after = await storedHeaders(id);
    expect(after).not.toHaveProperty('x-gitlab-token');
    expect(after).not.toHaveProperty('x-site-key');
    expect(after['x-gitlab-event']).toBe('Push Hook');
    expect((await inbox.deadLetter(id)).status).toBe('dead'); // only the headers changed
  });

  it('secretHeaders and a headerToken verifier of your own name headers that are never stored', async () => {
    inbox = failing({
      provider: undefined,
      verify: headerToken({ header: 'X-Hook-Secret', secret: TOKEN }),
      secretHeaders: ['X-Internal-Key'],
    });
    const id = randomUUID();
    const delivery = {
      headers: {
        'content-type': 'application/json',
        'idempotency-key': id,
        'x-hook-secret': TOKEN,
        'x-internal-key': 'internal-1',
        'x-request-id': 'r-1',
      },
      rawBody: Buffer.from('{}'),
    };
    expect((await inbox.receive(delivery)).status).toBe(200);
    expect(await storedHeaders(id)).toEqual({
      'content-type': 'application/json',
      'idempotency-key': id,
      'x-request-id': 'r-1',
    });
  });

  it('secretHeaders is checked at construction, naming the option', () => {
    const make = (secretHeaders: unknown) => () =>
      createInbox({ db: t.db, handle: () => {}, secretHeaders: secretHeaders as string[] });
    expect(make('x-a')).toThrow(
      expect.objectContaining({ name: InboxOptionsError.name, option: 'secretHeaders' }),
    );
    expect(make(['bad header'])).toThrow(expect.objectContaining({ option: 'secretHeaders[0]' }));
    expect(make(['Content-Type'])).toThrow(/content-type/);
  });
});
