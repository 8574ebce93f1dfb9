/**
 * Helpers shared by the ordering suites: ordered deliveries of the ledger's events, and an
 * inbox + ledger pair on one test database.
 */
import type { Kysely } from 'kysely';
import { Ledger } from '../../examples/ledger/ledger.js';
import { createInbox, type Delivery, type Inbox, type InboxOptions, type Outcome } from '../../src/index.js';
import type { TargetDb } from './databases.js';
import { watchInvariants } from './invariants.js';

/** The ledger event for `seq` of `key`: id `${key}:${seq}`, amount `seq` unless given. */
export function ordered(key: string, seq: number, amount = seq, id = `${key}:${seq}`): Delivery {
  return {
    headers: {
      'content-type': 'application/json',
      'idempotency-key': id,
      'x-key': key,
      'x-seq': String(seq),
    },
    rawBody: Buffer.from(JSON.stringify({ amount })),
  };
}

export interface LedgerInbox {
  readonly inbox: Inbox;
  readonly ledger: Ledger;
  /** Ledger entries of `key`, in applied order, as `seq`s. */
  seqs(key: string): Promise<number[]>;
  balance(key: string): Promise<number>;
  db(): Promise<Kysely<any>>;
  /** Sends deliveries one after another; returns their outcomes. */
  send(...deliveries: Delivery[]): Promise<Outcome[]>;
}

/**
 * An inbox whose handler is the ledger's, on the test's schemas. `wrap` may decorate the
 * ledger handler (to fail or block on purpose). `db` defaults to the target's first handle.
 */
export async function ledgerInbox(
  t: TargetDb,
  options: Omit<InboxOptions, 'handle'> = {},
  wrap: (handle: Ledger['handle']) => InboxOptions['handle'] = (h) => h,
): Promise<LedgerInbox> {
  const ledger = new Ledger(t.appSchema);
  // Checked by invariantsHoldAfterEach() in the suites that call it.
  const inbox = watchInvariants(
    createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      ...options,
      handle: wrap(ledger.handle),
    }),
  );
  const db = await inbox.kysely();
  await ledger.setup(db);
  return {
    inbox,
    ledger,
    db: () => inbox.kysely(),
    async seqs(key) {
      return (await ledger.account(db, key)).entries.map((e) => e.seq!);
    },
    async balance(key) {
      return (await ledger.account(db, key)).balance;
    },
    async send(...deliveries) {
      const out: Outcome[] = [];
      for (const d of deliveries) out.push(await inbox.receive(d));
      return out;
    },
  };
}

export function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

/** POSTs one ordered ledger event over HTTP; returns status, headers and the parsed body. */
export async function postOrdered(
  url: string,
  key: string,
  seq: number,
  amount = seq,
  id = `${key}:${seq}`,
): Promise<{ status: number; headers: Headers; body: any }> {
  const d = ordered(key, seq, amount, id);
  const res = await fetch(url, {
    method: 'POST',
    headers: d.headers as Record<string, string>,
    body: Buffer.from(d.rawBody),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}
