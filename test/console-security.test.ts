/**
 * The console's security, over HTTP through Express, Koa and Fastify (the ledger example with
 * CONSOLE_TOKEN): every route is 401 without credentials and shows nothing of the inbox; a
 * cross-origin POST, or one without the CSRF token, is refused and changes nothing; the login
 * form sets an HttpOnly, SameSite=Strict cookie; a console without authentication refuses to
 * start unless it is `insecure` on loopback; `readOnly` offers and accepts no action.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { FRAMEWORKS, type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { type ConsoleResponse, createConsole, html, serveConsole } from '../src/console/index.js';
import { InboxOptionsError, openOperations } from '../src/index.js';
import { CONSOLE_TOKEN, csrfOf, deliver } from './support/console.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';
import { rawRequest } from './support/http.js';

const target = targets.at(-1)!;
let db: TargetDb;
beforeAll(async () => {
  db = await target.open();
});
afterAll(async () => {
  await db?.close();
});

const bearer = { authorization: `Bearer ${CONSOLE_TOKEN}` };
const SECRET_ID = 'evt-secret-7f3a';

/** Every page and action of the console, as [method, path]. */
const ROUTES: Array<[string, string]> = [
  ['GET', '/console'],
  ['GET', '/console/'],
  ['GET', '/console/dead-letters'],
  ['GET', '/console/dead-letters?reason=rejected'],
  ['GET', `/console/events/default/${SECRET_ID}`],
  ['GET', '/console/keys'],
  ['GET', '/console/keys?blocked=1'],
  ['GET', '/console/keys/default/acct-s'],
  ['GET', `/console/search?id=${SECRET_ID}`],
  ['GET', '/console/no-such-page'],
  ['POST', '/console/actions/replay'],
  ['POST', '/console/actions/replay-all'],
  ['POST', '/console/actions/skip'],
  ['POST', '/console/actions/unblock'],
  ['POST', '/console/actions/skip-key'],
  ['POST', '/console/logout'],
  ['DELETE', '/console/'],
];

describe.each(FRAMEWORKS)('the console over %s', (framework) => {
  const schemas = { inbox: uniqueName('wi'), ledger: uniqueName('app') };
  let app: LedgerServer;
  let origin: string;
  beforeAll(async () => {
    app = await startLedger({
      framework,
      consoleToken: CONSOLE_TOKEN,
      ledgerSchema: schemas.ledger,
      inbox: { db: db.db, schema: schemas.inbox, sweepIntervalMs: 0 },
    });
    origin = app.url;
    // A dead letter (rejected: amount is not an integer) to look for in what is answered.
    expect(await deliver(app.url, SECRET_ID, { amount: 'x' }, { 'x-key': 'acct-s', 'x-seq': '1' })).toBe(422);
  });
  afterAll(async () => {
    const k = await app?.inbox.kysely();
    if (k)
      for (const s of Object.values(schemas))
        await sql`drop schema if exists ${sql.id(s)} cascade`.execute(k);
    await app?.close();
  });

  test('without credentials every route is 401 and reveals nothing', async () => {
    for (const [method, path] of ROUTES) {
      const res = await fetch(`${origin}${path}`, {
        method,
        headers: { 'content-type': 'application/x-www-form-urlencoded', origin },
        body: method === 'POST' ? `target=default%2F${SECRET_ID}&confirmed=yes` : undefined,
      });
      const text = await res.text();
      expect(res.status, `${method} ${path}`).toBe(401);
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(text, `${method} ${path}`).not.toContain(SECRET_ID);
      expect(text).not.toContain('acct-s');
      expect(text).toContain('name="token"'); // the login form, nothing else
    }
    // A wrong token is no credential either.
    const wrong = await fetch(`${origin}/console/`, {
      headers: { authorization: 'Bearer wrong-token-0123456789' },
    });
    expect(wrong.status).toBe(401);
    expect((await app.inbox.deadLetter(SECRET_ID)).status).toBe('dead');
  });

  test('with the token as a Bearer header the pages answer', async () => {
    const overview = await fetch(`${origin}/console/`, { headers: bearer });
    expect(overview.status).toBe(200);
    expect(overview.headers.get('content-security-policy')).toMatch(/script-src 'nonce-/);
    expect(overview.headers.get('cache-control')).toBe('no-store');
    const list = await (await fetch(`${origin}/console/dead-letters`, { headers: bearer })).text();
    expect(list).toContain(SECRET_ID);
    const bad = await fetch(`${origin}/console/dead-letters?reason=nonsense`, { headers: bearer });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain('must be one of poison, late, rejected');
  });

  test('a cross-origin POST is refused and changes nothing, even with a valid token and CSRF token', async () => {
    const csrf = csrfOf(await (await fetch(`${origin}/console/dead-letters`, { headers: bearer })).text());
    const form = `csrf=${encodeURIComponent(csrf)}&target=default%2F${SECRET_ID}&confirmed=yes`;
    const post = (headers: Record<string, string>, body = form) =>
      fetch(`${origin}/console/actions/skip`, {
        method: 'POST',
        headers: { ...bearer, 'content-type': 'application/x-www-form-urlencoded', ...headers },
        body,
      });
    expect((await post({ origin: 'http://evil.example' })).status).toBe(403);
    expect((await post({ origin: 'null' })).status).toBe(403);
    expect((await post({ referer: 'http://evil.example/page' })).status).toBe(403);
    expect((await post({})).status).toBe(403); // neither Origin nor Referer
    // Same origin, but no CSRF token (or another one): refused too.
    expect((await post({ origin }, `target=default%2F${SECRET_ID}&confirmed=yes`)).status).toBe(403);
    expect((await post({ origin }, form.replace(/^csrf=[^&]+/, 'csrf=forged'))).status).toBe(403);
    const key = await (await app.inbox.operations()).key('acct-s');
    expect(key?.gaps).toEqual([]);
    // The same form from the console's own origin goes through.
    const ok = await post({ origin });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toContain('skipped seq 1');
  });

  test('the login form sets an HttpOnly, SameSite=Strict cookie that opens the console', async () => {
    const refused = await fetch(`${origin}/console/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin },
      body: 'token=not-the-token-at-all',
      redirect: 'manual',
    });
    expect(refused.status).toBe(401);
    expect(refused.headers.get('set-cookie')).toBeNull();
    const res = await fetch(`${origin}/console/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin },
      body: `token=${CONSOLE_TOKEN}`,
      redirect: 'manual',
    });
    expect(res.status).toBe(303);
    const cookie = res.headers.get('set-cookie')!;
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Strict/);
    expect(cookie).toMatch(/Path=\/console/);
    expect(cookie).not.toContain(CONSOLE_TOKEN);
    const page = await fetch(`${origin}/console/keys`, { headers: { cookie: cookie.split(';')[0]! } });
    expect(page.status).toBe(200);
  });
});

describe('options', () => {
  test('no authorize hook, no token, not insecure: refuses to start, naming the option', async () => {
    const ops = await openOperations({ db: db.db, schema: db.schema });
    try {
      expect(() => createConsole({ operations: ops })).toThrow(InboxOptionsError);
      expect(() => createConsole({ operations: ops })).toThrow(/`authorize`/);
      expect(() => createConsole({ operations: ops, token: 'short' })).toThrow(/`token`/);
      expect(() =>
        createConsole({ operations: ops, insecure: true, trustedOrigins: ['https://a.example/x'] }),
      ).toThrow(/trustedOrigins/);
      await expect(
        serveConsole({ operations: ops, insecure: true, host: '0.0.0.0', port: 0 }),
      ).rejects.toThrow(/`host`/);
    } finally {
      await ops.close();
    }
  });

  test('insecure on loopback answers; readOnly offers no action and refuses POSTs', async () => {
    const ops = await openOperations({ db: db.db, schema: db.schema });
    await (await import('../src/db/migrations.js')).migrateToLatest(ops.db, ops.tables);
    const served = await serveConsole({ operations: ops, insecure: true, readOnly: true, port: 0 });
    try {
      const page = await fetch(`${served.url}/dead-letters`);
      expect(page.status).toBe(200);
      const text = await page.text();
      expect(text).toContain('(read-only)');
      expect(text).not.toContain('/actions/');
      const csrf = csrfOf(text);
      const post = await fetch(`${served.url}/actions/unblock`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', origin: served.url },
        body: `csrf=${encodeURIComponent(csrf)}&source=default&key=a&confirmed=yes`,
      });
      expect(post.status).toBe(403);
      expect(await post.text()).toContain('read-only');
    } finally {
      await served.close();
      await ops.close();
    }
  });

  test('an authorize hook names who acts, and that name is logged with the action', async () => {
    const ops = await openOperations({ db: db.db, schema: db.schema });
    const lines: Array<Record<string, unknown>> = [];
    const log = (obj: object) => lines.push(obj as Record<string, unknown>);
    const served = await serveConsole({
      operations: ops,
      port: 0,
      authorize: (request) => (request.headers['x-user'] === 'alice' ? { name: 'alice' } : null),
      logger: { debug: log, info: log, warn: log, error: log },
    });
    try {
      expect((await fetch(`${served.url}/`)).status).toBe(401);
      const page = await (await fetch(`${served.url}/keys`, { headers: { 'x-user': 'alice' } })).text();
      const res = await fetch(`${served.url}/actions/unblock`, {
        method: 'POST',
        headers: {
          'x-user': 'alice',
          'content-type': 'application/x-www-form-urlencoded',
          origin: served.url,
        },
        body: `csrf=${encodeURIComponent(csrfOf(page))}&source=default&key=no-such-key&confirmed=yes`,
      });
      expect(res.status).toBe(200);
      expect(await res.text()).toContain('not-found');
      expect(lines).toContainEqual(
        expect.objectContaining({ console: 'unblock', who: 'alice', key: 'no-such-key' }),
      );
    } finally {
      await served.close();
      await ops.close();
    }
  });
});

test('html escapes every interpolated value', () => {
  const hostile = `"><img src=x onerror=alert(1)><script>alert(2)</script>'\``;
  expect(html`<td title="${hostile}">${hostile}</td>`.markup).toBe(
    '<td title="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;alert(2)&lt;/script&gt;&#39;&#96;">&quot;&gt;&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;alert(2)&lt;/script&gt;&#39;&#96;</td>',
  );
});

test('over TLS (as the framework sees it) the session cookie is Secure too', async () => {
  const ops = await openOperations({ db: db.db, schema: db.schema });
  try {
    const app = createConsole({ operations: ops, token: CONSOLE_TOKEN });
    const login = (secure: boolean) =>
      app.handle({
        method: 'POST',
        url: '/login',
        basePath: '/console',
        headers: { host: 'ops.example', origin: `${secure ? 'https' : 'http'}://ops.example` },
        body: `token=${CONSOLE_TOKEN}`,
        secure,
      });
    expect((await login(true)).headers['set-cookie']).toMatch(/; Secure$/);
    expect((await login(false)).headers['set-cookie']).not.toMatch(/Secure/);
  } finally {
    await ops.close();
  }
});

describe('host trust, sessions and logins', () => {
  let ops: Awaited<ReturnType<typeof openOperations>>;
  beforeAll(async () => {
    ops = await openOperations({ db: db.db, schema: db.schema });
    await (await import('../src/db/migrations.js')).migrateToLatest(ops.db, ops.tables);
  });
  afterAll(async () => {
    await ops?.close();
  });

  const form = { 'content-type': 'application/x-www-form-urlencoded' };
  const loginAs = (
    app: ReturnType<typeof createConsole>,
    token: string,
    headers: Record<string, string> = {},
  ) =>
    app.handle({
      method: 'POST',
      url: '/login',
      headers: { host: 'ops.example', origin: 'http://ops.example', ...form, ...headers },
      body: `token=${encodeURIComponent(token)}`,
      remoteAddress: '198.51.100.7',
    });
  const cookieOf = (res: ConsoleResponse) => String(res.headers['set-cookie']).split(';')[0]!;
  const get = (app: ReturnType<typeof createConsole>, cookie: string, url = '/keys') =>
    app.handle({ method: 'GET', url, headers: { host: 'ops.example', cookie } });

  test('insecure mode refuses the DNS-rebinding request: another Host gets no CSRF token and runs no action', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = (obj: object) => lines.push(obj as Record<string, unknown>);
    const served = await serveConsole({
      operations: ops,
      insecure: true,
      port: 0,
      logger: { debug: log, info: log, warn: log, error: log },
    });
    try {
      const port = new URL(served.url).port;
      // The real console, as an operator opens it: a loopback name, any port.
      const own = await rawRequest(`${served.url}/keys`, { headers: { host: `localhost:${port}` } });
      expect(own.status).toBe(200);
      const csrf = csrfOf(own.text);
      // A page on evil.example whose name now resolves to 127.0.0.1.
      const rebound = { host: 'evil.example:8080', origin: 'http://evil.example:8080' };
      const page = await rawRequest(`${served.url}/keys`, { headers: rebound });
      expect(page.status).toBe(403);
      expect(page.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(page.text)).toMatchObject({ status: 403, field: 'host' });
      expect(page.text).not.toContain('csrf');
      const post = await rawRequest(`${served.url}/actions/unblock`, {
        method: 'POST',
        headers: { ...rebound, ...form },
        body: `csrf=${encodeURIComponent(csrf)}&source=default&key=k-1&confirmed=yes`,
      });
      expect(post.status).toBe(403);
      expect(JSON.parse(post.text)).toMatchObject({ field: 'host' });
      expect(lines.filter((l) => l.console === 'unblock')).toEqual([]);
    } finally {
      await served.close();
    }
  });

  test('allowedHosts: a name matches any port, name:port only that port; another Host is refused before authentication', async () => {
    const app = createConsole({
      operations: ops,
      token: CONSOLE_TOKEN,
      allowedHosts: ['ops.example', 'admin.example:8443'],
    });
    const status = async (host: string) =>
      (await app.handle({ method: 'GET', url: '/', headers: { host, ...bearer } })).status;
    expect(await status('ops.example')).toBe(200);
    expect(await status('OPS.example:9000')).toBe(200);
    expect(await status('admin.example:8443')).toBe(200);
    expect(await status('admin.example:8080')).toBe(403);
    expect(await status('evil.example')).toBe(403);
    expect((await app.handle({ method: 'GET', url: '/', headers: bearer })).status).toBe(403); // no Host
  });

  test('each login is its own session; logout revokes it (the old cookie gets 401), others stay', async () => {
    const app = createConsole({ operations: ops, token: CONSOLE_TOKEN });
    const first = cookieOf(await loginAs(app, CONSOLE_TOKEN));
    const second = cookieOf(await loginAs(app, CONSOLE_TOKEN));
    expect(first).not.toBe(second);
    const page = await get(app, first);
    expect(page.status).toBe(200);
    const out = await app.handle({
      method: 'POST',
      url: '/logout',
      headers: { host: 'ops.example', origin: 'http://ops.example', cookie: first, ...form },
      body: `csrf=${encodeURIComponent(csrfOf(page.body))}`,
    });
    expect(out.status).toBe(303);
    expect(out.headers['set-cookie']).toMatch(/Max-Age=0/);
    expect((await get(app, first)).status).toBe(401);
    expect((await get(app, second)).status).toBe(200);
  });

  test("two replicas with the same secret accept each other's sessions and forms; without it they refuse them", async () => {
    const secret = 'a'.repeat(16) + 'b'.repeat(16);
    const [a, b] = [1, 2].map(() => createConsole({ operations: ops, token: CONSOLE_TOKEN, secret }));
    const cookie = cookieOf(await loginAs(a!, CONSOLE_TOKEN));
    const page = await get(a!, cookie);
    const post = (app: ReturnType<typeof createConsole>, headers: Record<string, string>, csrf: string) =>
      app.handle({
        method: 'POST',
        url: '/actions/unblock',
        headers: { host: 'ops.example', origin: 'http://ops.example', ...form, ...headers },
        body: `csrf=${encodeURIComponent(csrf)}&source=default&key=k-1`,
      });
    // Replica B: A's session opens it, and A's form is accepted (the confirmation page, nothing done).
    expect((await get(b!, cookie)).status).toBe(200);
    const onB = await post(b!, { cookie }, csrfOf(page.body));
    expect([onB.status, onB.body]).toEqual([200, expect.stringContaining('Unblock key k-1?')]);
    // A forged session is refused; logging out on B refuses the cookie there at once.
    expect((await get(b!, `${cookie.slice(0, -2)}xx`)).status).toBe(401);
    const logout = await b!.handle({
      method: 'POST',
      url: '/logout',
      headers: { host: 'ops.example', origin: 'http://ops.example', cookie, ...form },
      body: `csrf=${encodeURIComponent(csrfOf((await get(b!, cookie)).body))}`,
    });
    expect(logout.headers['set-cookie']).toMatch(/Max-Age=0/);
    expect((await get(b!, cookie)).status).toBe(401);

    // Without the secret each process keys its own: B knows nothing of A's session or forms.
    const [c, d] = [1, 2].map(() => createConsole({ operations: ops, token: CONSOLE_TOKEN }));
    const cCookie = cookieOf(await loginAs(c!, CONSOLE_TOKEN));
    expect((await get(d!, cCookie)).status).toBe(401);
    const cPage = await c!.handle({
      method: 'GET',
      url: '/keys',
      headers: { host: 'ops.example', ...bearer },
    });
    const refused = await post(d!, bearer, csrfOf(cPage.body));
    expect(refused.status).toBe(403);
    expect(() => createConsole({ operations: ops, token: CONSOLE_TOKEN, secret: 'short' })).toThrow(
      /option `secret` must be a string of 32 characters or more/,
    );
  });

  test('a session ends after sessionTtl', async () => {
    const app = createConsole({ operations: ops, token: CONSOLE_TOKEN, sessionTtl: '10m' });
    const login = await loginAs(app, CONSOLE_TOKEN);
    expect(login.headers['set-cookie']).toMatch(/Max-Age=600(;|$)/);
    const cookie = cookieOf(login);
    expect((await get(app, cookie)).status).toBe(200);
    vi.useFakeTimers({ now: Date.now() + 600_000, toFake: ['Date'] });
    try {
      expect((await get(app, cookie)).status).toBe(401);
    } finally {
      vi.useRealTimers();
    }
  });

  test('the sixth failed login within a minute from one address is 429 problem+json with Retry-After', async () => {
    const app = createConsole({ operations: ops, token: CONSOLE_TOKEN, trustProxy: true });
    const from = (address: string, token: string) =>
      loginAs(app, token, { 'x-forwarded-for': `203.0.113.9, ${address}` });
    for (let i = 0; i < 5; i++) expect((await from('192.0.2.1', 'wrong-token-0123456789')).status).toBe(401);
    const sixth = await from('192.0.2.1', 'wrong-token-0123456789');
    expect(sixth.status).toBe(429);
    expect(sixth.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(JSON.parse(sixth.body)).toMatchObject({ status: 429, field: 'token' });
    expect(Number(sixth.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(Number(sixth.headers['retry-after'])).toBeLessThanOrEqual(60);
    // Throttled means the token is not even looked at; another address is not throttled.
    expect((await from('192.0.2.1', CONSOLE_TOKEN)).status).toBe(429);
    expect((await from('192.0.2.2', CONSOLE_TOKEN)).status).toBe(303);
  });

  test('the session cookie is Secure behind a trusted TLS proxy, or always when configured', async () => {
    const overTls = { 'x-forwarded-proto': 'https' };
    const trusting = createConsole({ operations: ops, token: CONSOLE_TOKEN, trustProxy: true });
    expect((await loginAs(trusting, CONSOLE_TOKEN, overTls)).headers['set-cookie']).toMatch(/; Secure$/);
    expect((await loginAs(trusting, CONSOLE_TOKEN)).headers['set-cookie']).not.toMatch(/Secure/);
    // Without trustProxy anyone could send the header: it is ignored.
    const plain = createConsole({ operations: ops, token: CONSOLE_TOKEN });
    expect((await loginAs(plain, CONSOLE_TOKEN, overTls)).headers['set-cookie']).not.toMatch(/Secure/);
    const always = createConsole({ operations: ops, token: CONSOLE_TOKEN, secureCookie: 'always' });
    expect((await loginAs(always, CONSOLE_TOKEN)).headers['set-cookie']).toMatch(/; Secure$/);
  });

  test('the new options are checked at construction, naming each', () => {
    const make = (extra: Record<string, unknown>) => () =>
      createConsole({ operations: ops, token: CONSOLE_TOKEN, ...extra });
    expect(make({ allowedHosts: ['http://ops.example'] })).toThrow(/`allowedHosts`/);
    expect(make({ allowedHosts: [] })).toThrow(/`allowedHosts`/);
    expect(make({ sessionTtl: '5s' })).toThrow(/`sessionTtl`/);
    expect(make({ sessionTtl: 'soon' })).toThrow(/`sessionTtl`/);
    expect(make({ trustProxy: 'yes' })).toThrow(/`trustProxy`/);
    expect(make({ secureCookie: true })).toThrow(/`secureCookie`/);
  });
});
