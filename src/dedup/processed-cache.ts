/** An LRU of events processed here, matched on hash, key and seq; it learns whether a body parses as JSON. */
export interface CachedEvent {
  readonly hash: string;
  readonly key: string | null;
  readonly seq: number | null;
  readonly result: unknown;
}

export const MAX_RESULT_CHARS = 2048;

/** Not parsed yet: most remembered events are never asked for again. */
const UNPARSED = Symbol('unparsed');

class Entry implements CachedEvent {
  bodyParses = false;
  #result: unknown = UNPARSED;
  constructor(
    readonly hash: string,
    readonly key: string | null,
    readonly seq: number | null,
    readonly resultJson: string | undefined,
  ) {}

  get result(): unknown {
    if (this.#result === UNPARSED)
      this.#result = this.resultJson === undefined ? null : JSON.parse(this.resultJson);
    return this.#result;
  }
}

export class ProcessedCache {
  readonly #entries = new Map<string, Entry>();
  constructor(readonly maxEntries: number) {}

  duplicateOf(id: string, hash: string, key: string | null, seq: number | null): CachedEvent | undefined {
    const hit = this.#entries.get(id);
    if (!hit || hit.hash !== hash || hit.key !== key || hit.seq !== seq) return undefined;
    this.#entries.delete(id);
    this.#entries.set(id, hit);
    return hit;
  }

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

  /** Whether a copy of `id` with these bytes is known to parse as JSON (not a use: no refresh). */
  bodyParses(id: string, hash: string): boolean {
    const entry = this.#entries.get(id);
    return entry !== undefined && entry.hash === hash && entry.bodyParses;
  }

  noteBodyParses(event: CachedEvent): void {
    (event as Entry).bodyParses = true;
  }
}
