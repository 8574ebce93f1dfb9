/**
 * Where this instance last left each ordered key's cursor: the seq after the last event of the
 * key it saw committed as processed, in a bounded in-process LRU. It only chooses how a
 * delivery is claimed, never what is decided: a delivery whose seq is the one remembered is
 * most likely its key's turn, and tries the turn's plain statements first
 * (src/sql/try-claim.ts, `tryTurn`), which check that against the key row under its lock; any other goes
 * to the claim function at once, as before. The turn's statements cost PostgreSQL much less
 * than the claim function, but when they cannot decide the claim follows in a round trip of
 * its own: trying them for a delivery whose key this instance never saw (a new key, most
 * often) would cost that round trip every time.
 *
 * A remembered cursor is stale when another instance, a drain or a worker moved it since, or
 * the key row was deleted: the delivery then tries the turn, finds it is not, and pays the
 * round trip. A cursor is remembered only after COMMIT, so a rolled-back run never leaves one.
 */
export class KeyCursors {
  readonly #next = new Map<string, number>();
  constructor(readonly maxKeys: number) {}

  /** Whether `seq` is the next seq of `key` as this instance last saw it. */
  isNext(key: string, seq: number): boolean {
    return this.#next.get(key) === seq;
  }

  /** An event of `key` at `seq` committed as processed: its cursor is now past it. */
  applied(key: string, seq: number): void {
    if (this.maxKeys === 0) return;
    const next = seq + 1;
    // Refresh its place (a key that keeps receiving stays), never moving a cursor back: of
    // two runs that committed one after the other, the later seq is the cursor's.
    const known = this.#next.get(key);
    this.#next.delete(key);
    this.#next.set(key, known !== undefined && known > next ? known : next);
    if (this.#next.size > this.maxKeys) this.#next.delete(this.#next.keys().next().value!);
  }

  get size(): number {
    return this.#next.size;
  }
}
