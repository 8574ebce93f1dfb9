/**
 * What the console's tests share: a ledger with the console at /console and a poisoned key,
 * deliveries, and Debian's Chromium driven by playwright-core.
 */
import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';

export const CONSOLE_TOKEN = 'console-test-token-0123456789';

/** Debian's Chromium (`apt-get install chromium`; .ci/run installs it when missing). */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export function chromiumInstalled(): boolean {
  return existsSync(CHROMIUM);
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
}

/** POSTs one webhook to the ledger; returns the status. */
export async function deliver(
  base: string,
  id: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<number> {
  const res = await fetch(`${base}/webhooks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': id, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  await res.arrayBuffer();
  return res.status;
}

/** The CSRF token embedded in a console page's forms. */
export function csrfOf(page: string): string {
  const m = /name="csrf" value="([^"]+)"/.exec(page);
  if (!m) throw new Error('no CSRF token on the page');
  return m[1]!;
}
