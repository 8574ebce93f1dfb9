/** Events in this process; each lane is ready, timed or dead-headed, so `claim` costs what it returns. */
import { randomUUID } from 'node:crypto';
import { seqNotAfterError } from './event.js';
import type {
  ClaimedEvent,
  DeadLetter,
  DeadReason,
  DeadTarget,
  Enqueued,
  NewEvent,
  SenderStore,
  StoredEvent,
} from './store.js';

interface Entry {
  readonly event: StoredEvent;
  status: 'pending' | 'dead';
  attempts: number;
  failures: number;
  firstAttemptAt: number | null;
  runAt: number;
  token: string | null;
  leaseUntil: number;
  reason: DeadReason | null;
  lastError: string | null;
}

interface Lane {
  readonly id: string;
  /** Sorted by seq; the head is the next to deliver. */
  readonly queue: Entry[];
  /** Bumped whenever the lane is rescheduled: timer entries of an older version are stale. */
  version: number;
  timed: boolean;
}

interface Timer {
  readonly at: number;
  readonly lane: Lane;
  readonly version: number;
}

/** A binary min-heap by due time; stale entries stay until they outnumber the live ones. */
class TimerHeap {
  #items: Timer[] = [];

  compact(live: (t: Timer) => boolean): void {
    const kept = this.#items.filter(live);
    this.#items = [];
    for (const t of kept) this.push(t);
  }

  get size(): number {
    return this.#items.length;
  }

  peek(): Timer | undefined {
    return this.#items[0];
  }

  push(t: Timer): void {
    const a = this.#items;
    a.push(t);
    let i = a.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (a[parent].at <= a[i].at) break;
      [a[parent], a[i]] = [a[i], a[parent]];
      i = parent;
    }
  }

  pop(): Timer | undefined {
    const a = this.#items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0 && last) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && a[l].at < a[m].at) m = l;
        if (r < a.length && a[r].at < a[m].at) m = r;
        if (m === i) break;
        [a[m], a[i]] = [a[i], a[m]];
        i = m;
      }
    }
    return top;
  }
}

export class MemoryStore implements SenderStore {
  readonly kind = 'memory';
  readonly #lanes = new Map<string, Lane>();
  /** Lanes whose head may be claimed now, in the order they became ready (fairness). */
  readonly #ready = new Set<Lane>();
  readonly #timers = new TimerHeap();
  /** Lanes whose current schedule is in the heap. */
  #timed = 0;
  /** Lanes whose head is dead-lettered. */
  readonly #blocked = new Set<Lane>();
  /** Events in line (dead letters too), by id. */
  readonly #inLine = new Map<string, Entry>();
  /** Delivered or skipped ids, oldest first. */
  readonly #done = new Map<string, { key: string | null; seq: number | null; at: number }>();
  readonly #nextSeq = new Map<string, number>();
  readonly #now: () => number;
  readonly #rememberIds: number;

  constructor(options: { now?: () => number; rememberIds?: number } = {}) {
    this.#now = options.now ?? Date.now;
    this.#rememberIds = options.rememberIds ?? 100_000;
  }

  async add(event: NewEvent): Promise<Enqueued> {
    const pending = this.#inLine.get(event.id);
    if (pending) {
      const { key, seq } = pending.event;
      return { id: event.id, key, seq, created: false, settled: pending.status === 'dead' };
    }
    const done = this.#done.get(event.id);
    if (done) return { id: event.id, key: done.key, seq: done.seq, created: false, settled: true };
    let seq = event.seq;
    if (event.key !== null) {
      const next = this.#nextSeq.get(event.key) ?? 1;
      if (seq !== null && seq < next) throw seqNotAfterError(seq, next - 1);
      seq ??= next;
      this.#nextSeq.set(event.key, seq + 1);
    }
    const entry: Entry = {
      event: { ...event, seq },
      status: 'pending',
      attempts: 0,
      failures: 0,
      firstAttemptAt: null,
      runAt: 0,
      token: null,
      leaseUntil: 0,
      reason: null,
      lastError: null,
    };
    this.#inLine.set(event.id, entry);
    const laneId = laneOf(event.key, event.id);
    let lane = this.#lanes.get(laneId);
    if (!lane) {
      lane = { id: laneId, queue: [], version: 0, timed: false };
      this.#lanes.set(laneId, lane);
    }
    lane.queue.push(entry);
    if (lane.queue.length === 1) this.#schedule(lane);
    return { id: event.id, key: event.key, seq, created: true, settled: false };
  }

  #schedule(lane: Lane): void {
    lane.version++;
    if (lane.timed) {
      lane.timed = false;
      this.#timed--;
    }
    this.#ready.delete(lane);
    this.#blocked.delete(lane);
    const head = lane.queue[0];
    if (!head) {
      this.#lanes.delete(lane.id);
      return;
    }
    if (head.status === 'dead') {
      this.#blocked.add(lane);
      return;
    }
    const at = head.token !== null ? head.leaseUntil : head.runAt;
    if (at <= this.#now()) {
      this.#ready.add(lane);
      return;
    }
    this.#timers.push({ at, lane, version: lane.version });
    lane.timed = true;
    this.#timed++;
    if (this.#timers.size > 1024 && this.#timers.size > 2 * this.#timed) {
      this.#timers.compact((t) => t.version === t.lane.version);
    }
  }

  #fire(now: number): void {
    for (let t = this.#timers.peek(); t && t.at <= now; t = this.#timers.peek()) {
      this.#timers.pop();
      if (t.version !== t.lane.version) continue;
      const head = t.lane.queue[0];
      // The lease ran out without a completion (the attempt is over: leaseMs > timeoutMs).
      if (head && head.token !== null) head.token = null;
      this.#schedule(t.lane);
    }
  }

  async claim(limit: number, leaseMs: number): Promise<ClaimedEvent[]> {
    const now = this.#now();
    this.#fire(now);
    const out: ClaimedEvent[] = [];
    for (const lane of this.#ready) {
      if (out.length >= limit) break;
      const head = lane.queue[0];
      head.attempts++;
      head.token = randomUUID();
      head.leaseUntil = now + leaseMs;
      head.firstAttemptAt ??= now;
      out.push({
        ...head.event,
        attempt: head.attempts,
        failures: head.failures,
        firstAttemptAt: head.firstAttemptAt,
        token: head.token,
      });
      this.#schedule(lane);
    }
    return out;
  }

  #claimed(event: ClaimedEvent): { lane: Lane; entry: Entry } | undefined {
    const lane = this.#lanes.get(laneOf(event.key, event.id));
    const entry = lane?.queue[0];
    if (!lane || !entry || entry.token !== event.token) return undefined;
    return { lane, entry };
  }

  #finish(lane: Lane): void {
    const entry = lane.queue.shift()!;
    this.#inLine.delete(entry.event.id);
    const { key, seq } = entry.event;
    this.#done.set(entry.event.id, { key, seq, at: this.#now() });
    if (this.#done.size > this.#rememberIds) {
      const oldest = this.#done.keys().next().value;
      if (oldest !== undefined) this.#done.delete(oldest);
    }
    this.#schedule(lane);
  }

  async delivered(event: ClaimedEvent): Promise<void> {
    const found = this.#claimed(event);
    if (found) this.#finish(found.lane);
  }

  async retryLater(event: ClaimedEvent, delayMs: number, error: string, counted: boolean): Promise<void> {
    const found = this.#claimed(event);
    if (!found) return;
    const { entry } = found;
    entry.token = null;
    entry.runAt = this.#now() + delayMs;
    entry.lastError = error;
    if (counted) entry.failures++;
    this.#schedule(found.lane);
  }

  async deadLetter(event: ClaimedEvent, reason: DeadReason, error: string): Promise<void> {
    const found = this.#claimed(event);
    if (!found) return;
    // It stays at the head of its lane, so the key's later events wait behind it.
    const { entry } = found;
    entry.token = null;
    entry.status = 'dead';
    entry.reason = reason;
    entry.lastError = error;
    this.#schedule(found.lane);
  }

  #deadLane(target: DeadTarget): Lane | undefined {
    let lane: Lane | undefined;
    if (typeof target === 'string') lane = this.#lanes.get(target);
    else {
      const entry = this.#inLine.get(target.id);
      if (entry) lane = this.#lanes.get(laneOf(entry.event.key, entry.event.id));
    }
    return lane?.queue[0]?.status === 'dead' ? lane : undefined;
  }

  async retry(target: DeadTarget): Promise<number> {
    const lane = this.#deadLane(target);
    if (!lane) return 0;
    const e = lane.queue[0];
    e.status = 'pending';
    e.attempts = 0;
    e.failures = 0;
    e.firstAttemptAt = null;
    e.runAt = 0;
    e.reason = null;
    this.#schedule(lane);
    return 1;
  }

  async skip(target: DeadTarget): Promise<number> {
    const lane = this.#deadLane(target);
    if (!lane) return 0;
    this.#finish(lane);
    return 1;
  }

  async deadLetters(key?: string): Promise<DeadLetter[]> {
    const out: DeadLetter[] = [];
    for (const lane of this.#blocked) {
      const e = lane.queue[0];
      if (key !== undefined && e.event.key !== key) continue;
      out.push({ ...e.event, attempts: e.attempts, reason: e.reason!, lastError: e.lastError });
    }
    return out.sort((a, b) => (a.key ?? '').localeCompare(b.key ?? '') || (a.seq ?? 0) - (b.seq ?? 0));
  }

  async outstanding(): Promise<number> {
    let blocked = 0;
    for (const lane of this.#blocked) blocked += lane.queue.length;
    return this.#inLine.size - blocked;
  }

  nextDueInMs(): number | undefined {
    if (this.#ready.size > 0) return 0;
    for (let t = this.#timers.peek(); t; t = this.#timers.peek()) {
      if (t.version === t.lane.version) return Math.max(0, t.at - this.#now());
      this.#timers.pop();
    }
    return undefined;
  }

  async prune(retentionMs: number): Promise<number> {
    const before = this.#now() - retentionMs;
    let n = 0;
    for (const [id, done] of this.#done) {
      if (done.at > before) break;
      this.#done.delete(id);
      n++;
    }
    return n;
  }

  async close(): Promise<void> {}
}

function laneOf(key: string | null, id: string): string {
  return key === null ? `\0${id}` : key;
}
