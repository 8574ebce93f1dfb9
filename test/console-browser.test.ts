/**
 * The operator console in a real browser: Debian's Chromium driven by playwright-core, against
 * the ledger example (Express) on real PostgreSQL with CONSOLE_TOKEN. One browser for the file.
 * The flows an operator follows: sign in; the overview; find the dead letter a poison event
 * left; open it; replay it once the handler is fixed; see it applied in the ledger (with the
 * event held behind it); unblock a blocked key; hostile payloads, ids, keys and headers render
 * as text and run nothing; a form posted from another origin of the same site, with the
 * session cookie and even the user's CSRF token, changes nothing.
 *
 * CONSOLE_SCREENSHOTS=1 saves the overview and a dead letter to docs/images/.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { sql } from 'kysely';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { CONSOLE_TOKEN, chromiumInstalled, deliver, launchChromium } from './support/console.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';

const target = targets.at(-1)!;
const SCREENSHOTS = process.env.CONSOLE_SCREENSHOTS === '1';
const IMAGES = join(import.meta.dirname, '..', 'docs', 'images');

// Hostile values from a sender: each would run script if it reached the page as markup.
const XSS_ID = 'evt-"><img src=x onerror=window.__xss=1>';
const XSS_KEY = '<script>window.__xss=2</script>';
const XSS_BODY = {
  amount: '<script>window.__xss=3</script>',
  note: '"><img src=x onerror="window.__xss=4">',
};
const XSS_HEADER = '<svg onload=window.__xss=5>';

describe.skipIf(!chromiumInstalled())('the console in Chromium', () => {
  const schemas = { inbox: uniqueName('wi'), ledger: uniqueName('app') };
  let db: TargetDb;
  let app: LedgerServer;
  let browser: Browser;
  let page: Page;
  let base: string;
  const dialogs: string[] = [];

  beforeAll(async () => {
    db = await target.open();
    app = await startLedger({
      framework: 'express',
      consoleToken: CONSOLE_TOKEN,
      ledgerSchema: schemas.ledger,
      inbox: { db: db.db, schema: schemas.inbox, sweepIntervalMs: 0, maxAttempts: 2 },
    });
    base = `${app.url}/console`;
    // Some traffic that went through (the overview's counts and chart).
    for (let seq = 1; seq <= 12; seq++) {
      const status = await deliver(
        app.url,
        `evt-ok-${seq}`,
        { amount: seq },
        { 'x-key': 'acct-9', 'x-seq': `${seq}` },
      );
      expect(status).toBe(200);
    }
    // A poison event: the handler fails for acct-1 until it is "fixed"; seq 2 waits behind it.
    app.ledger.failNext.set('acct-1', 1000);
    expect(await deliver(app.url, 'evt-1', { amount: 10 }, { 'x-key': 'acct-1', 'x-seq': '1' })).toBe(500);
    expect(await deliver(app.url, 'evt-1', { amount: 10 }, { 'x-key': 'acct-1', 'x-seq': '1' })).toBe(200);
    expect(await deliver(app.url, 'evt-2', { amount: 20 }, { 'x-key': 'acct-1', 'x-seq': '2' })).toBe(202);
    // Another blocked key, to unblock.
    app.ledger.failNext.set('acct-2', 1000);
    for (const expected of [500, 200])
      expect(await deliver(app.url, 'evt-b1', { amount: 5 }, { 'x-key': 'acct-2', 'x-seq': '1' })).toBe(
        expected,
      );
    // Hostile values, dead-lettered at once (amount is not an integer: RejectEvent); the key blocks.
    const status = await deliver(app.url, XSS_ID, XSS_BODY, {
      'x-key': XSS_KEY,
      'x-seq': '1',
      'x-note': XSS_HEADER,
    });
    expect(status).toBe(422);

    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
  });

  afterAll(async () => {
    await browser?.close();
    const k = await app?.inbox.kysely();
    if (k)
      for (const s of Object.values(schemas))
        await sql`drop schema if exists ${sql.id(s)} cascade`.execute(k);
    await app?.close();
    await db?.close();
  });

  const noScriptRan = async () => {
    expect(await page.evaluate(() => (globalThis as any).__xss)).toBeUndefined();
    expect(dialogs).toEqual([]);
  };

  test('sign in through the login form, then the overview', async () => {
    const first = await page.goto(`${base}/`);
    expect(first?.status()).toBe(401);
    await page.fill('input[name=token]', CONSOLE_TOKEN);
    await page.click('button:has-text("Sign in")');
    await page.waitForURL(`${base}/`);
    await expect.poll(() => page.textContent('h1')).toBe('Overview');
    const counts = await page.textContent('[data-testid=counts]');
    expect(counts).toMatch(/3\s*dead letters/);
    expect(counts).toMatch(/3\s*blocked keys/);
    expect(counts).toMatch(/1\s*held/);
    expect(counts).toMatch(/12\s*processed/);
    expect(await page.textContent('main')).toContain('acct-1');
    if (SCREENSHOTS) await page.screenshot({ path: join(IMAGES, 'console-overview.png'), fullPage: true });
    await noScriptRan();
  });

  test('find the poison dead letter, open it, replay it after the fix, see it in the ledger', async () => {
    await page.click('header a:has-text("Dead letters")');
    await page.selectOption('select[name=reason]', 'poison');
    await page.click('button:has-text("Filter")');
    await page.waitForURL(/reason=poison/);
    const rows = await page.locator('main table tr').allTextContents();
    expect(rows.some((r) => r.includes('evt-1') && r.includes('acct-1'))).toBe(true);
    expect(rows.some((r) => r.includes('evt-b1'))).toBe(true);
    expect(rows.some((r) => r.includes('evt-"'))).toBe(false); // the rejected one is filtered out

    await page.click('main a:text-is("evt-1")');
    await expect.poll(() => page.textContent('h1')).toBe('Event evt-1');
    expect(await page.textContent('[data-testid=payload]')).toBe('{\n  "amount": 10\n}');
    expect(await page.textContent('[data-testid=last-error]')).toContain(
      'failing on purpose for account acct-1',
    );
    expect(await page.textContent('[data-testid=event]')).toContain('(blocks its key)');
    if (SCREENSHOTS) await page.screenshot({ path: join(IMAGES, 'console-dead-letter.png'), fullPage: true });

    app.ledger.failNext.delete('acct-1'); // the handler is fixed
    await page.click('button:text-is("Replay")');
    await expect.poll(() => page.textContent('h1')).toBe('Confirm');
    await page.click('button:has-text("Yes, replay")');
    await expect.poll(() => page.textContent('h1')).toBe('Replayed');
    expect(await page.textContent('[data-testid=results]')).toContain('requeued (now processed)');

    // Applied in the ledger, and seq 2 drained behind it.
    const account = (await (await fetch(`${app.url}/accounts/acct-1`)).json()) as {
      balance: number;
      entries: Array<{ id: string }>;
    };
    expect(account.balance).toBe(30);
    expect(account.entries.map((e) => e.id)).toEqual(['evt-1', 'evt-2']);
    await page.goto(`${base}/keys/default/acct-1`);
    expect(await page.textContent('[data-testid=key-state]')).toBe('open');
  });

  test('unblock a blocked key', async () => {
    await page.goto(`${base}/keys?blocked=1`);
    await page.click('main a:text-is("acct-2")');
    expect(await page.textContent('[data-testid=key-state]')).toBe('blocked at seq 1 (poison)');
    await page.click('button:has-text("Unblock")');
    await page.click('button:has-text("Yes, unblock")');
    await expect.poll(() => page.textContent('h1')).toBe('Unblocked');
    expect(await page.textContent('[data-testid=results]')).toContain('unblocked; open');
    const key = await (await app.inbox.operations()).key('acct-2');
    expect(key?.state).toBe('open');
  });

  test('hostile ids, keys, payloads and headers render as text and run nothing', async () => {
    await page.goto(`${base}/dead-letters?reason=rejected`);
    expect(await page.textContent('main table')).toContain(XSS_ID);
    expect(await page.textContent('main table')).toContain(XSS_KEY);
    expect(await page.locator('main img, main svg, main script').count()).toBe(0);
    await noScriptRan();

    await page.click(`main a:text-is(${JSON.stringify(XSS_ID)})`);
    await expect.poll(() => page.textContent('h1')).toBe(`Event ${XSS_ID}`);
    const payload = JSON.parse((await page.textContent('[data-testid=payload]'))!);
    expect(payload).toEqual(XSS_BODY);
    expect(await page.textContent('[data-testid=headers]')).toContain(XSS_HEADER);
    expect(await page.textContent('[data-testid=event]')).toContain(XSS_KEY);
    expect(await page.locator('main img, main svg, main script').count()).toBe(0);
    await noScriptRan();

    await page.goto(`${base}/keys/default/${encodeURIComponent(XSS_KEY)}`);
    expect(await page.textContent('h1')).toBe(`Key ${XSS_KEY}`);
    await page.goto(`${base}/search?id=${encodeURIComponent(XSS_ID)}`);
    expect(await page.textContent('h1')).toBe(`Event ${XSS_ID}`);
    await noScriptRan();
  });

  test('a form posted from another origin of the same site carries the session, and is refused by the origin check', async () => {
    // The user's own CSRF token, as if the page had it: what stands between it and the action
    // is then the Origin check alone.
    await page.goto(`${base}/dead-letters`);
    const csrf = await page.inputValue('input[name=csrf] >> nth=0');
    const evil: Server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<form id=f method=post action="${base}/actions/skip">
<input name=csrf value="${csrf}"><input name=target value="default/evt-b1"><input name=confirmed value=yes></form>
<script>document.getElementById('f').submit()</script>`);
    });
    // 127.0.0.1 on another port: another origin, but the same site, so the SameSite=Strict
    // session cookie goes with the POST (from localhost, another site, it would not: 401, and
    // the origin check would never run).
    await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve));
    try {
      const answer = page.waitForResponse((r) => r.url().endsWith('/actions/skip'));
      await page.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
      const response = await answer;
      expect(await response.request().headerValue('cookie')).toMatch(/webhook_inbox_console=/);
      expect(response.status()).toBe(403);
      expect(await response.text()).toContain('did not come from the console');
      const key = await (await app.inbox.operations()).key('acct-2');
      expect(key?.gaps).toEqual([]);
      expect(key?.nextSeq).toBe(1);
    } finally {
      evil.closeAllConnections();
      await new Promise((resolve) => evil.close(resolve));
    }
  });
});
