/**
 * Deferred mode sends the claims that wait for an acknowledgement connection together, one
 * statement and one commit (src/receive/claim-batches.ts). Each delivery's answer is its own:
 * one refused by PostgreSQL does not cost its neighbours their 202, a batch that dies with its
 * connection or its process answers no 2xx for anything it did not commit, and what was
 * answered 2xx is applied exactly once. Real PostgreSQL, real HTTP, real processes.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { startLedger } from '../examples/ledger/start.js';
import { METRIC_NAMES } from '../src/index.js';
import { postgresTarget, postgresUrl, uniqueName } from './support/databases.js';
import { deliver } from './support/deliver.js';
import { invariantsHoldAfterEach, watchInvariants } from './support/invariants.js';
import { killAll, startLedgerProcess } from './support/ledger-processes.js';
import { ledgerInbox, ordered } from './support/ordering.js';
import { perTestSchemas } from './support/per-test-schemas.js';

invariantsHoldAfterEach();

const uid = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;

/** A connection string whose sessions can be told apart in pg_stat_activity. */
function urlFor(applicationName: string): string {
  return `${postgresUrl}${postgresUrl!.includes('?') ? '&' : '?'}application_name=${applicationName}`;
}

/** Batch sizes the inbox observed: their count and their sum. */
async function batches(registry: Registry): Promise<{ count: number; sum: number }> {
  const metric = registry.getSingleMetric(METRIC_NAMES.claimBatchSize) as any;
  const values = (await metric.get()).values as Array<{ metricName: string; value: number }>;
  const of = (suffix: string) => values.find((v) => v.metricName.endsWith(suffix))?.value ?? 0;
  return { count: of('_count'), sum: of('_sum') };
}

/**
 * Sends every id until it is answered 2xx, `inFlight` at a time, as a sender that retries does;
 * the answers it saw, by id.
 */
async function sendAll(
  url: () => string,
  ids: readonly string[],
  inFlight: number,
  retries = true,
  onAnswer: (id: string, status: number) => void = () => {},
): Promise<Map<string, number[]>> {
  const seen = new Map<string, number[]>(ids.map((id) => [id, []]));
  const queue = [...ids];
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
        for (;;) {
          const status = await deliver(url(), id, { amount: 1 }).then(
            (r) => r.status,
            () => 0, // no answer: the connection dropped
          );
          seen.get(id)!.push(status);
          onAnswer(id, status);
          if (!retries || (status >= 200 && status < 300)) break;
        }
      }
    }),
  );
  return seen;
}

describe.runIf(postgresTarget)('deferred claims in batches', () => {
  const schemas = perTestSchemas(postgresTarget!);
  let admin: pg.Pool;
  beforeAll(() => {
    admin = new pg.Pool({ connectionString: postgresUrl!, max: 2 });
    admin.on('error', () => {});
  });
  afterEach(() => killAll());
  afterAll(() => admin?.end());

  /** Waits until `count` events are processed, then checks the ledger applied each exactly once. */
  async function appliedOnceEach(t: { schema: string; appSchema: string }, count: number): Promise<void> {
    await vi.waitFor(
      async () => {
        const { rows } = await admin.query(
          `select count(*)::int as n from "${t.schema}".events where status = 'processed'`,
        );
        expect(rows[0].n).toBe(count);
      },
      { timeout: 120_000, interval: 100 },
    );
    const { rows } = await admin.query(
      `select event_id, count(*)::int as n from "${t.appSchema}".entries group by event_id`,
    );
    expect(rows).toHaveLength(count);
    expect(rows.filter((r) => r.n !== 1)).toEqual([]);
  }

  it("one delivery PostgreSQL refuses (its key locked past lockTimeoutMs) does not cost its batch's others their 202", async () => {
    const t = schemas();
    const registry = new Registry();
    const app = await ledgerInbox(
      { ...t, db: postgresUrl! },
      { mode: 'deferred', workers: 0, ackPoolSize: 1, lockTimeoutMs: 300, metrics: { registry } },
    );
    try {
      expect((await app.inbox.receive(ordered('locked', 1))).kind).toBe('pending');
      const other = await admin.connect();
      try {
        await other.query('begin');
        await other.query(`select 1 from "${t.schema}".keys where key = 'locked' for update`);
        // The first finds the one connection free and goes alone; the rest wait for it and go
        // together, the locked key's claim among them.
        const free = ordered('free', 1);
        const others = Array.from({ length: 8 }, (_, i) => ordered(`other-${i}`, 1));
        const answers = await Promise.all(
          [free, ordered('locked', 2), ...others].map((d) => app.inbox.receive(d)),
        );
        expect(answers.map((a) => a.kind)).toEqual(['pending', 'in-flight', ...others.map(() => 'pending')]);
        expect(answers[1]).toMatchObject({ status: 409 });
      } finally {
        await other.query('rollback');
        other.release();
      }
      // A batch carried more than one claim: the isolation above was of a batch.
      const seen = await batches(registry);
      expect(seen.sum).toBeGreaterThan(seen.count);
      const { rows } = await admin.query(
        `select key, status from "${t.schema}".events where key like 'other-%' or key = 'free'`,
      );
      expect(rows).toHaveLength(9);
      expect(new Set(rows.map((r) => r.status))).toEqual(new Set(['pending']));
    } finally {
      await app.inbox.close();
    }
  });

  it('acknowledgement connections terminated mid-batch: every delivery answered 2xx is applied once, the rest retried and applied once', async () => {
    const t = schemas();
    const name = uniqueName('wi_acks');
    const registry = new Registry();
    const app = await startLedger({
      ledgerSchema: t.appSchema,
      ingest: false,
      inbox: {
        db: urlFor(name),
        schema: t.schema,
        mode: 'deferred',
        workers: 0,
        sweepIntervalMs: 0,
        metrics: { registry },
      },
    });
    watchInvariants(app.inbox);
    const ids: string[] = [];
    let sending = true;
    let terminated = 0;
    // A few cuts, not a storm: a killer that terminated every batch would starve the senders'
    // retries of any commit at all.
    const cuts = 5;
    const killer = (async () => {
      // Terminate the acknowledgement connections while their batches are in flight.
      while (sending && terminated < cuts) {
        const { rowCount } = await admin.query(
          `select pg_terminate_backend(pid) from pg_stat_activity
            where application_name = $1 and state = 'active' and query like '%claim_many%'`,
          [name],
        );
        terminated += rowCount ?? 0;
        await new Promise((r) => setImmediate(r));
      }
    })();
    const seen = new Map<string, number[]>();
    // Rounds of 200 deliveries, 40 in flight, until the batches were cut (at most 10 rounds).
    for (let round = 0; round < 10 && (round < 2 || terminated < cuts); round++) {
      const batch = Array.from({ length: 200 }, (_, i) => uid(`term${round}-${i}`));
      ids.push(...batch);
      for (const [id, statuses] of await sendAll(() => app.url, batch, 40)) seen.set(id, statuses);
    }
    sending = false;
    await killer;
    try {
      expect(terminated).toBeGreaterThan(0);
      const statuses = [...seen.values()].flat();
      // Some were answered 503 (their batch died with its connection), and sent again.
      expect(statuses.some((s) => s === 503)).toBe(true);
      const seenBatches = await batches(registry);
      expect(seenBatches.sum).toBeGreaterThan(seenBatches.count);
      // Another instance applies them all: each exactly once.
      const worker = await ledgerInbox(
        { ...t, db: t.another() },
        { mode: 'deferred', workers: 4, sweepIntervalMs: 50 },
      );
      try {
        await worker.inbox.sweep();
        await appliedOnceEach(t, ids.length);
      } finally {
        await worker.inbox.close();
      }
    } finally {
      await app.close();
    }
  });

  it('an instance SIGKILLed while batches are in flight: every delivery it answered 2xx is applied once; the rest, sent again elsewhere, once', async () => {
    const t = schemas();
    const doomed = await startLedgerProcess({
      databaseUrl: postgresUrl!,
      schema: t.schema,
      ledgerSchema: t.appSchema,
      sweepIntervalMs: 0,
      inbox: { mode: 'deferred', workers: 0 },
    });
    const ids = Array.from({ length: 400 }, (_, i) => uid(`kill${i}`));
    const answers = new Map<string, number>();
    let acknowledged = 0;
    // One try each at the doomed instance, 40 in flight; killed once it answered 100 of them.
    const once = sendAll(
      () => doomed.url,
      ids,
      40,
      false,
      (id, status) => {
        answers.set(id, status);
        if (status === 202) acknowledged++;
      },
    );
    await vi.waitFor(() => expect(acknowledged).toBeGreaterThanOrEqual(100), {
      timeout: 120_000,
      interval: 5,
    });
    await doomed.kill();
    await once;
    const unanswered = ids.filter((id) => answers.get(id) !== 202);
    expect(unanswered.length).toBeGreaterThan(0);
    // The sender retries what was not acknowledged, at another instance, which applies all.
    const rescuer = await startLedger({
      ledgerSchema: t.appSchema,
      ingest: false,
      inbox: { db: t.another(), schema: t.schema, mode: 'deferred', workers: 4, sweepIntervalMs: 50 },
    });
    watchInvariants(rescuer.inbox);
    try {
      await sendAll(() => rescuer.url, unanswered, 40);
      await rescuer.inbox.sweep();
      await appliedOnceEach(t, ids.length);
    } finally {
      await rescuer.close();
    }
  });
});
