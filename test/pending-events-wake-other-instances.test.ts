/**
 * A pending event stored by one instance wakes the workers of another at once: the claim that
 * stores it queues a NOTIFY (src/db/sql/notify-pending.ts), sent at COMMIT, and every instance's
 * listener hears it. The waking instance here polls once an hour and sweeps never, so the only
 * way its workers can apply the events in time is that NOTIFY: without it the test times out.
 * Both of the claim's pending inserts are covered: an unordered event, and an ordered one in
 * its turn (the key's later seq, held until then, follows it). Real PostgreSQL, two pools.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Delivery } from '../src/index.js';
import { postgresTarget } from './support/databases.js';
import { invariantsHoldAfterEach } from './support/invariants.js';
import { type LedgerInbox, ledgerInbox, ordered } from './support/ordering.js';
import { perTestSchemas } from './support/per-test-schemas.js';

invariantsHoldAfterEach();

function unordered(id: string, amount: number): Delivery {
  return {
    headers: { 'content-type': 'application/json', 'idempotency-key': id },
    rawBody: Buffer.from(JSON.stringify({ amount })),
  };
}

describe.runIf(postgresTarget)('pending events wake the workers of other instances', () => {
  const schemas = perTestSchemas(postgresTarget!);
  const open: LedgerInbox[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((app) => app.inbox.close()));
  });

  async function instances() {
    const t = schemas();
    // Acknowledges only: it stores events as pending and applies none.
    const acker = await ledgerInbox(t, { mode: 'deferred', workers: 0 });
    open.push(acker);
    // Applies only, on a pool of its own; woken by NOTIFY or by nothing for an hour.
    const worker = await ledgerInbox(
      { ...t, db: t.another() },
      { mode: 'deferred', workers: 1, pollIntervalMs: 3_600_000, sweepIntervalMs: 0 },
    );
    open.push(worker);
    await worker.inbox.ready();
    await worker.inbox.idle();
    return { acker, worker };
  }

  it('an unordered pending event is applied by the other instance', async () => {
    const { acker, worker } = await instances();
    expect(await acker.inbox.receive(unordered('u-1', 5))).toMatchObject({ status: 202, kind: 'pending' });
    await vi.waitFor(async () => expect(await worker.balance('none')).toBe(5), {
      timeout: 20_000,
      interval: 20,
    });
  });

  it("an ordered event in its turn is applied by the other instance, then the key's next seq", async () => {
    const { acker, worker } = await instances();
    // Seq 2 first: held, not due, so not announced; seq 1 is due and announces the key.
    expect(await acker.inbox.receive(ordered('k', 2))).toMatchObject({ status: 202, kind: 'held' });
    expect(await acker.inbox.receive(ordered('k', 1))).toMatchObject({ status: 202, kind: 'pending' });
    await vi.waitFor(async () => expect(await worker.seqs('k')).toEqual([1, 2]), {
      timeout: 20_000,
      interval: 20,
    });
  });
});
