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

async function check(inbox: Inbox): Promise<void> {
  try {
    found.push(...(await checkInvariants(await inbox.kysely(), inbox.tables)));
  } catch {
    // Never opened (a test of bad options), or its database or schema is gone (the test
    // closed them itself): nothing left to check, now or later.
    watched.delete(inbox);
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
    expect(violations, 'invariant violations in the inbox tables').toEqual([]);
  });
}
