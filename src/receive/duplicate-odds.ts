/**
 * How likely the next delivery that missed the in-process cache is a duplicate: an
 * exponentially weighted average over the recent ones (about the last eight).
 *
 * Why it decides anything: a primary-key read before BEGIN (sql/find-processed.ts) answers a
 * processed duplicate in one round trip, where the claim takes two (BEGIN+claim, COMMIT); for
 * a new event the read is one round trip wasted. With a share p of duplicates, reading first
 * costs p + (1 - p)(n + 3) round trips per delivery against 2p + (1 - p)(n + 2) without it: it
 * pays exactly when p > 1/2. So the read is sent in a retry storm and skipped otherwise, and
 * either way the claim still decides: the read only ever answers what the claim would.
 */
const WEIGHT = 1 / 8;

export class DuplicateOdds {
  #share = 0;

  /** A delivery that missed the in-process cache turned out a duplicate, or not. */
  note(duplicate: boolean): void {
    this.#share += ((duplicate ? 1 : 0) - this.#share) * WEIGHT;
  }

  /** More likely a duplicate than not: the read before BEGIN pays. */
  get likely(): boolean {
    return this.#share > 0.5;
  }
}
