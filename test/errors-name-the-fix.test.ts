/**
 * The misconfigurations a first deploy meets each say what to do: an unset secret, an empty
 * `db`, tables nobody migrated, a provider's webhook without `provider`, a misspelt option.
 * And the defaults that avoid them: `source` is the provider's name, time options take
 * durations.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { standardWebhooks, stripe } from '../src/delivery/providers.js';
import { createInbox, type Inbox, InboxOptionsError } from '../src/index.js';
import { resolveOptions } from '../src/runtime/resolve-options.js';
import { freshPGlite } from './support/databases.js';

const handle = () => {};

let db: Awaited<ReturnType<typeof freshPGlite>>;
const inboxes: Inbox[] = [];
beforeAll(async () => {
  db = await freshPGlite();
});
afterAll(async () => {
  await Promise.all(inboxes.map((inbox) => inbox.close()));
  await db.close();
});

function optionError(build: () => unknown): InboxOptionsError {
  try {
    build();
  } catch (err) {
    expect(err).toBeInstanceOf(InboxOptionsError);
    return err as InboxOptionsError;
  }
  throw new Error('expected an InboxOptionsError');
}

describe('errors name the fix', () => {
  it('an unset secret names the option and says it got undefined', () => {
    const err = optionError(() => stripe({ secret: process.env.WEBHOOK_INBOX_TEST_UNSET_SECRET as string }));
    expect(err.option).toBe('verify.secret');
    expect(err.message).toMatch(
      /`verify.secret` got undefined: is the environment variable that holds the secret set/,
    );
    expect(optionError(() => standardWebhooks({ secret: '' })).message).toContain('got an empty string');
  });

  it("db: '' (an unset DATABASE_URL) is refused at construction, in production and outside it", () => {
    const before = process.env.NODE_ENV;
    try {
      for (const env of ['production', 'development']) {
        process.env.NODE_ENV = env;
        const err = optionError(() => createInbox({ db: '', handle }));
        expect(err.option, env).toBe('db');
        expect(err.message, env).toContain('is an empty string (is DATABASE_URL set?)');
      }
    } finally {
      process.env.NODE_ENV = before;
    }
  });

  it("db: 'postgress://…' (a misspelt scheme) is refused at construction, naming the accepted forms", () => {
    const err = optionError(() =>
      createInbox({ db: 'postgress://app:hunter2@db.internal:5432/app', handle }),
    );
    expect(err.option).toBe('db');
    expect(err.message).toContain('must be a postgres:// or postgresql:// URL');
    expect(err.message).toContain("'memory', a pg.Pool, a Kysely instance or a PGlite instance");
    expect(err.message).toContain(
      'got "postgress://app:***@db.internal:5432/app" ("postgress://" is not a PostgreSQL scheme)',
    );
    expect(err.message).not.toContain('hunter2');
  });

  it("db: '127.0.0.1:5432/x' (a URL without its scheme) is refused at construction, suggesting postgres://", () => {
    const err = optionError(() => createInbox({ db: '127.0.0.1:5432/x', handle }));
    expect(err.option).toBe('db');
    expect(err.message).toContain('must be a postgres:// or postgresql:// URL');
    expect(err.message).toContain('(did you mean "postgres://127.0.0.1:5432/x"?)');
  });

  it('tables nobody migrated: 503, and the log and health() say to run `webhook-inbox migrate`', async () => {
    const lines: string[] = [];
    const at = (obj: object, msg?: string) => lines.push(`${msg} ${JSON.stringify(obj)}`);
    const inbox = createInbox({
      db,
      schema: 'never_migrated',
      migrate: false,
      sweepIntervalMs: 0,
      logger: { warn: at, error: at },
      handle,
    });
    inboxes.push(inbox);
    const outcome = await inbox.receive({ headers: { 'idempotency-key': 'e1' }, rawBody: Buffer.from('{}') });
    expect(outcome.status).toBe(503);
    expect(lines.join('\n')).toContain("the inbox's tables are missing: run `webhook-inbox migrate`");
    expect((await inbox.health()).error).toBe("the inbox's tables are missing: run `webhook-inbox migrate`");
  });

  it("a provider's webhook without `provider`: the 400 points at provider, fields.id and idFromBody", async () => {
    const inbox = createInbox({ db, schema: 'missing_id', source: 'stripe', sweepIntervalMs: 0, handle });
    inboxes.push(inbox);
    const outcome = await inbox.receive({
      headers: { 'content-type': 'application/json', 'stripe-signature': 't=1,v1=00' },
      rawBody: Buffer.from('{"id":"evt_1","object":"event"}'),
    });
    expect(outcome.status).toBe(400);
    expect(outcome.body).toMatchObject({ field: 'idempotency-key' });
    expect(outcome.body.detail).toMatch(
      /header is required: .*`provider` \(e\.g\. stripe\(\{ secret \}\)\).*`fields\.id`.*`idFromBody`/,
    );
  });

  it('an unknown option is refused, with the nearest known name', () => {
    const err = optionError(() => createInbox({ db: 'memory', handle, maxAtempts: 3 } as never));
    expect(err.option).toBe('maxAtempts');
    expect(err.message).toContain('is not an inbox option; did you mean `maxAttempts`?');
    // A page the user can open: the installed package holds no docs/.
    expect(err.message).toContain(
      '(https://github.com/webhook-inbox/webhook-inbox/blob/main/docs/configuration.md lists them)',
    );
    expect(
      optionError(() => resolveOptions({ db: 'memory', handle, zzz: 1 } as never)).message,
    ).not.toContain('did you mean');
  });
});

describe('defaults that avoid them', () => {
  it("source defaults to the provider's name; a source given wins", () => {
    const provider = stripe({ secret: 'whsec_dGVzdA==' });
    expect(resolveOptions({ db: 'memory', handle, provider }).source).toBe('stripe');
    expect(resolveOptions({ db: 'memory', handle, provider, source: 'payments' }).source).toBe('payments');
    expect(resolveOptions({ db: 'memory', handle }).source).toBe('default');
  });

  it('every time option takes milliseconds or a duration string', () => {
    const o = resolveOptions({
      db: 'memory',
      handle,
      bodyTimeoutMs: '10s',
      lockTimeoutMs: '2s',
      gapTimeoutMs: '1m',
      sweepIntervalMs: '500ms',
      retryBaseMs: '2s',
      retryCapMs: '1h',
      redisTimeoutMs: 75,
      pollIntervalMs: '2s',
      poolWaitTimeoutMs: '5s',
      handlerTimeoutMs: '1m30s',
      retryFor: '3d',
      retention: '14d',
    });
    expect(o).toMatchObject({
      bodyTimeoutMs: 10_000,
      lockTimeoutMs: 2000,
      gapTimeoutMs: 60_000,
      sweepIntervalMs: 500,
      retryBaseMs: 2000,
      retryCapMs: 3_600_000,
      redisTimeoutMs: 75,
      pollIntervalMs: 2000,
      poolWaitTimeoutMs: 5000,
      handlerTimeoutMs: 90_000,
      retryFor: 3 * 86_400_000,
      retention: 14 * 86_400_000,
    });
    const err = optionError(() => resolveOptions({ db: 'memory', handle, gapTimeoutMs: '30 parsecs' }));
    expect(err.option).toBe('gapTimeoutMs');
    expect(err.message).toContain("must be milliseconds or a duration such as '30s' or '1h'");
  });
});
