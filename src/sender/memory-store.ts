import { randomUUID } from 'node:crypto';
import type {
  ClaimedEvent,
  DeadLetter,
  DeadReason,
  Enqueued,
  NewEvent,
  SenderStore,
  StoredEvent,
} from './store.js';

interface Entry {
  readonly event: StoredEvent;
  status: 'pending' | 'dead';
  attempts: number;
  runAt: number;
  token: string | null;
  reason: DeadReason | null;
  lastError: string | null;
}

/** One line of events that must go in order: a key's, or a single unordered event's. */
interface Lane {
  readonly id: string;
  /** Sorted by seq; the head is the next to deliver. */
  readonly queue: Entry[];
}

/**
 * The default store: events live in this process and are lost if it exits. Use the Postgres
 * outbox (`db`) when that matters.
 */
export class MemoryStore implements SenderStore {
  readonly kind = 'memory';
  readonly #lanes = new Map<string, Lane>();
  /** Every id seen (delivered ones too): an id enqueued twice is stored once. */
  readonly #ids = new Map<string, { key: string | null; seq: number | null }>();
  readonly #nextSeq = new Map<string, number>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  async add(event: NewEvent): Promise<Enqueued> {
    const known = this.#ids.get(event.id);
    if (known) return { id: event.id, ...known, created: false };
    let seq = event.seq;
    if (event.key !== null) {
      const next = this.#nextSeq.get(event.key) ?? 1;
      seq ??= next;
      this.#nextSeq.set(event.key, Math.max(next, seq + 1));
    }
    const stored: StoredEvent = { ...event, seq };
    this.#ids.set(event.id, { key: event.key, seq });
    const laneId = event.key === null ? `\0${event.id}` : event.key;
    let lane = this.#lanes.get(laneId);
    if (!lane) {
      lane = { id: laneId, queue: [] };
      this.#lanes.set(laneId, lane);
    }
    const entry: Entry = {
      event: stored,
      status: 'pending',
      attempts: 0,
      runAt: 0,
      token: null,
      reason: null,
      lastError: null,
    };
    const q = lane.queue;
    // Usually appended; an explicit seq lower than the tail is placed in order.
    let i = q.length;
    while (i > 0 && (q[i - 1].event.seq ?? 0) > (seq ?? 0)) i--;
    q.splice(i, 0, entry);
    return { id: event.id, key: event.key, seq, created: true };
  }

  async claim(limit: number): Promise<ClaimedEvent[]> {
    const now = this.#now();
    const out: ClaimedEvent[] = [];
    for (const lane of this.#lanes.values()) {
      if (out.length >= limit) break;
      const head = lane.queue[0];
      if (!head || head.token !== null || head.status !== 'pending' || head.runAt > now) continue;
      head.attempts++;
      head.token = randomUUID();
      out.push({ ...head.event, attempt: head.attempts, token: head.token });
      // Fairness: a lane just served goes to the back of the line.
      this.#lanes.delete(lane.id);
      this.#lanes.set(lane.id, lane);
    }
    return out;
  }

  #entry(event: ClaimedEvent): { lane: Lane; entry: Entry } | undefined {
    const lane = this.#lanes.get(event.key === null ? `\0${event.id}` : event.key);
    const entry = lane?.queue[0];
    if (!lane || !entry || entry.token !== event.token) return undefined;
    return { lane, entry };
  }

  async delivered(event: ClaimedEvent): Promise<void> {
    const found = this.#entry(event);
    if (!found) return;
    found.lane.queue.shift();
    if (found.lane.queue.length === 0) this.#lanes.delete(found.lane.id);
  }

  async retryLater(event: ClaimedEvent, delayMs: number, error: string): Promise<void> {
    const found = this.#entry(event);
    if (!found) return;
    found.entry.token = null;
    found.entry.runAt = this.#now() + delayMs;
    found.entry.lastError = error;
  }

  async deadLetter(event: ClaimedEvent, reason: DeadReason, error: string): Promise<void> {
    const found = this.#entry(event);
    if (!found) return;
    // It stays at the head of its lane, so the key's later events wait behind it (an
    // unordered event has a lane of its own and blocks nothing).
    const { entry } = found;
    entry.token = null;
    entry.status = 'dead';
    entry.reason = reason;
    entry.lastError = error;
  }

  #deadOf(key: string): Entry[] {
    return (this.#lanes.get(key)?.queue ?? []).filter((e) => e.status === 'dead');
  }

  async retry(key: string): Promise<number> {
    const dead = this.#deadOf(key);
    for (const e of dead) {
      e.status = 'pending';
      e.attempts = 0;
      e.runAt = 0;
      e.reason = null;
    }
    return dead.length;
  }

  async skip(key: string): Promise<number> {
    const lane = this.#lanes.get(key);
    if (!lane) return 0;
    const before = lane.queue.length;
    const kept = lane.queue.filter((e) => e.status !== 'dead');
    lane.queue.splice(0, lane.queue.length, ...kept);
    if (kept.length === 0) this.#lanes.delete(key);
    return before - kept.length;
  }

  async deadLetters(key?: string): Promise<DeadLetter[]> {
    const out: DeadLetter[] = [];
    for (const lane of this.#lanes.values()) {
      for (const e of lane.queue) {
        if (e.status !== 'dead' || (key !== undefined && e.event.key !== key)) continue;
        out.push({ ...e.event, attempts: e.attempts, reason: e.reason!, lastError: e.lastError });
      }
    }
    return out;
  }

  async outstanding(): Promise<number> {
    let n = 0;
    for (const lane of this.#lanes.values()) {
      if (lane.queue[0]?.status === 'pending') n += lane.queue.length;
    }
    return n;
  }

  nextDueInMs(): number | undefined {
    const now = this.#now();
    let earliest: number | undefined;
    for (const lane of this.#lanes.values()) {
      const head = lane.queue[0];
      if (!head || head.token !== null || head.status !== 'pending') continue;
      if (earliest === undefined || head.runAt < earliest) earliest = head.runAt;
    }
    return earliest === undefined ? undefined : Math.max(0, earliest - now);
  }

  async close(): Promise<void> {}
}
