/**
 * Deferred claims, sent together: while every ack connection is busy, arriving claims wait, and the first one
 * freed sends them as one `claim_many`. A statement error answers them all; any other, each is sent alone.
 */
import { sqlState } from '../db/drivers/postgres-error.js';
import type { ClaimRow } from '../db/sql/claim.js';
import type { ClaimManyElement, ClaimManyShared } from '../db/sql/claim-many.js';
import type { Runtime } from '../runtime/runtime.js';

export const MAX_CLAIMS_PER_BATCH = 256;
/** The most payload bytes one statement carries (a batch always takes at least one claim). */
export const MAX_BATCH_BYTES = 4 * 1024 * 1024;

interface Waiting {
  readonly element: ClaimManyElement;
  readonly bytes: number;
  /** Sent in a batch of its own (its batch failed as a whole for a reason of one element's). */
  readonly alone: boolean;
  readonly queuedAt: number;
  resolve(row: ClaimRow): void;
  reject(err: unknown): void;
}

/** SQLSTATE classes that mean the statement could not run at all, whatever it carried. */
const WHOLE_BATCH = /^(08|53|57P|58)/;

export class ClaimBatches {
  readonly #rt: Runtime;
  readonly #queue: Waiting[] = [];
  #sending = 0;

  constructor(rt: Runtime) {
    this.#rt = rt;
  }

  /** The claim of one delivery (stored, never applied), answered once its batch committed. */
  claim(element: ClaimManyElement): Promise<ClaimRow> {
    return new Promise<ClaimRow>((resolve, reject) => {
      this.#queue.push({
        element,
        bytes: element.payload?.length ?? 0,
        alone: false,
        queuedAt: performance.now(),
        resolve,
        reject,
      });
      this.#send();
    });
  }

  /** As many statements as there are acknowledgement connections, each with what waits. */
  #send(): void {
    while (this.#sending < this.#connections() && this.#queue.length > 0) {
      const batch = this.#takeBatch();
      this.#sending++;
      void this.#claim(batch).finally(() => {
        this.#sending--;
        this.#send();
      });
    }
  }

  #connections(): number {
    const o = this.#rt.options;
    if (o.ackPoolSize > 0) return o.ackPoolSize;
    return this.#rt.database.kind === 'pglite' ? 1 : Math.max(1, o.poolSize - o.workers);
  }

  #takeBatch(): Waiting[] {
    const first = this.#queue.shift() as Waiting;
    const batch = [first];
    if (first.alone) return batch;
    let bytes = first.bytes;
    while (batch.length < MAX_CLAIMS_PER_BATCH && this.#queue.length > 0) {
      const next = this.#queue[0] as Waiting;
      if (next.alone || bytes + next.bytes > MAX_BATCH_BYTES) break;
      bytes += next.bytes;
      batch.push(this.#queue.shift() as Waiting);
    }
    return batch;
  }

  async #claim(batch: Waiting[]): Promise<void> {
    const rt = this.#rt;
    const o = rt.options;
    const shared: ClaimManyShared = {
      source: o.source,
      keepPayload: o.keepPayload,
      firstSeen: o.firstSeq === 'first-seen',
      maxHeld: o.maxHeldPerKey,
      maxAhead: o.maxSeqAhead,
      lockTimeout: claimLockTimeout(rt),
    };
    // One lock order for every batch (no deadlock); the sort is stable, so a key's claims keep their order.
    const ordered = [...batch].sort(byLockOrder);
    let rows: ClaimRow[];
    rt.metrics.claimBatch(batch.length);
    try {
      const elements = ordered.map((w) => w.element);
      const { acks, ownDriver } = rt.database;
      // The claim's SQL relies on READ COMMITTED, which a user's Kysely instance must be told.
      rows = ownDriver
        ? await rt.statements.claimMany(acks, shared, elements)
        : await acks
            .transaction()
            .setIsolationLevel('read committed')
            .execute((tx) => rt.statements.claimMany(tx, shared, elements));
    } catch (err) {
      const state = sqlState(err);
      if (batch.length === 1 || state === undefined || WHOLE_BATCH.test(state)) {
        for (const w of batch) w.reject(err);
        return;
      }
      // One element's error failed them all: each again alone, first in line.
      this.#queue.unshift(...batch.map((w) => ({ ...w, alone: true })));
      return;
    }
    const committedAt = performance.now();
    ordered.forEach((w, i) => {
      rt.metrics.acknowledgement((committedAt - w.queuedAt) / 1000);
      w.resolve(rows[i] as ClaimRow);
    });
  }
}

function byLockOrder(a: Waiting, b: Waiting): number {
  const ka = a.element.key;
  const kb = b.element.key;
  if (ka !== null && kb !== null) return ka < kb ? -1 : ka > kb ? 1 : 0;
  if (ka !== null) return -1;
  if (kb !== null) return 1;
  const ia = a.element.id;
  const ib = b.element.id;
  return ia < ib ? -1 : ia > ib ? 1 : 0;
}

const batches = new WeakMap<Runtime, ClaimBatches>();

export function claimBatchesOf(rt: Runtime): ClaimBatches {
  let b = batches.get(rt);
  if (!b) {
    b = new ClaimBatches(rt);
    batches.set(rt, b);
  }
  return b;
}

/** How long a claim waits for a concurrent delivery of its id or key ('reject': 1ms; 0 means none). */
export function claimLockTimeout(rt: Runtime): string {
  return rt.options.onInFlight === 'reject' ? '1ms' : rt.lockTimeout;
}
