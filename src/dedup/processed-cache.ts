/**
 * A bounded in-process LRU of events this instance saw processed, so that a duplicate
 * (the common case in a retry storm) is answered without a Postgres round trip, as
 * Powertools Idempotency's `useLocalCache` does.
 *
 * Why it is safe: an entry is written only after the event's transaction committed as
 * processed, and a processed event is final — its body hash, key, seq and result never change.
 * A delivery is answered from here only when hash, key and seq all match; anything else
 * (a mismatch, an unknown id, held or dead events, which are never cached) goes to Postgres.
 * Entries are per inbox, so per source. Memory is bounded by `maxEntries` × `MAX_RESULT_CHARS`.
 *
 * An entry also learns whether its body parses as JSON, from the first copy of it that did:
 * the hash is the bytes', so every later copy parses too, and the pipeline skips parsing them
 * when it needs no body (see `KnownBodies` in delivery/delivery.ts). Until then each copy is
 * parsed and a broken one refused, as without the cache.
 */
export interface CachedEvent {
  readonly hash: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly result: unknown;
}

/** Results larger than this (as JSON) are not cached: those duplicates go to Postgres. */
export const MAX_RESULT_CHARS = 2048;

/** Not parsed yet: every new event is remembered, and most are never asked for again. */
const UNPARSED = Symbol('unparsed');

class Entry implements CachedEvent {
  /** A copy of this event's bytes (same hash) parsed as JSON. */
  bodyParses = false;
  #result: unknown = UNPARSED;
  constructor(
    readonly hash: string,
    readonly key: string | null,
    readonly seq: number | null,
    /** The stored result as JSON, parsed at the first duplicate that asks for it. */
    readonly resultJson: string | undefined,
  ) {}

  /** The stored result (null when the handler returned nothing), the same object at every hit. */
  get result(): unknown {
    if (this.#result === UNPARSED)
      this.#result = this.resultJson === undefined ? null : JSON.parse(this.resultJson);
    return this.#result;
  }
}

export class ProcessedCache {
  readonly #entries = new Map<string, Entry>();
  constructor(readonly maxEntries: number) {}

  /** The cached event when this delivery is a duplicate of it (same hash, key and seq). */
  duplicateOf(id: string, hash: string, key: string | null, seq: number | null): CachedEvent | undefined {
    const hit = this.#entries.get(id);
    if (!hit || hit.hash !== hash || hit.key !== key || hit.seq !== seq) return undefined;
    // Refresh its place: a hot id in a retry storm stays cached.
    this.#entries.delete(id);
    this.#entries.set(id, hit);
    return hit;
  }

  /** Remembers a committed, processed event. `resultJson` is the stored result, or undefined. */
  remember(
    id: string,
    hash: string,
    key: string | null,
    seq: number | null,
    resultJson: string | undefined,
  ): void {
    if (this.maxEntries === 0 || (resultJson !== undefined && resultJson.length > MAX_RESULT_CHARS)) return;
    this.#entries.delete(id);
    this.#entries.set(id, new Entry(hash, key, seq, resultJson));
    if (this.#entries.size > this.maxEntries) this.#entries.delete(this.#entries.keys().next().value!);
  }

  /** Whether a copy of event `id` with these bytes (`hash`) is known to parse as JSON. Not a use: no refresh. */
  bodyParses(id: string, hash: string): boolean {
    const entry = this.#entries.get(id);
    return entry !== undefined && entry.hash === hash && entry.bodyParses;
  }

  /** A copy of `event` (as `duplicateOf` returned it) parsed as JSON: so do the next ones. */
  noteBodyParses(event: CachedEvent): void {
    (event as Entry).bodyParses = true;
  }

  get size(): number {
    return this.#entries.size;
  }
}
