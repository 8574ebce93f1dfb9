/**
 * The state invariants (src/testing/invariants.ts) after every test of a suite: each inbox a
 * test watches is checked when it closes (its tables may be gone after) and, if still open,
 * after the test. `invariantsHoldAfterEach()` registers the check; `watchInvariants(inbox)`
 * adds an inbox (ledgerInbox does it for the ordering suites).
 */
import { afterEach, expect } from 'vitest';
import type { Inbox } from '../../src/index.js';
import { checkInvariants, type InvariantViolation } from '../../src/testing/index.js';

const watched = new Set<Inbox>();
const found: InvariantViolation[] = [];
const failed: string[] = [];

/** The check cannot run because the tables are gone: a schema, table or database dropped, a pool ended. */
const GONE = /^(3F000|42P01|3D000)$/;

async function check(inbox: Inbox): Promise<void> {
  let db: Awaited<ReturnType<Inbox['kysely']>>;
  try {
    db = await inbox.kysely();
  } catch {
    // Never opened (a test of bad options) or closed: nothing left to check, now or later.
    watched.delete(inbox);
    return;
  }
  try {
    found.push(...(await checkInvariants(db, inbox.tables)));
  } catch (err) {
    watched.delete(inbox);
    const code = (err as { code?: unknown }).code;
    const gone = typeof code === 'string' ? GONE.test(code) : /ended|closed|terminat/i.test(String(err));
    // A check that fails for another reason is a broken check, not a passing one.
    if (!gone) failed.push(String(err));
  }
}

/** Checks `inbox`'s tables when it closes and after the current test. Returns the inbox. */
export function watchInvariants<T extends Inbox>(inbox: T): T {
  if (watched.has(inbox)) return inbox;
  watched.add(inbox);
  const close = inbox.close.bind(inbox);
  inbox.close = async () => {
    if (watched.delete(inbox)) await check(inbox);
    return close();
  };
  return inbox;
}

/** Fails each test after which a watched inbox's tables break an invariant. */
export function invariantsHoldAfterEach(): void {
  afterEach(async () => {
    for (const inbox of [...watched]) await check(inbox);
    const violations = found.splice(0);
    expect(failed.splice(0), 'the invariants check itself failed').toEqual([]);
    expect(violations, 'invariant violations in the inbox tables').toEqual([]);
  });
}
