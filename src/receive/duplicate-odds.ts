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
 * With Redis the same share decides whether to ask Redis first (`rare`).
 */
const WEIGHT = 1 / 8;

/**
 * Below this share the Redis GET before the claim is skipped. A GET costs no Postgres round
 * trip, but it costs CPU on both sides (measured 6 % of a new event's throughput on two
 * cores), and a duplicate it would have answered costs the claim's 2 round trips instead: it
 * pays once more than about one delivery in eight is a duplicate. One duplicate found by the
 * claim lifts the share to the threshold, so a storm turns the GET back on at once.
 */
const RARE = 1 / 8;

export class DuplicateOdds {
  #share: number;

  /**
   * `initialShare`: with Redis, one in two, so that a fresh instance asks Redis first (the
   * duplicates another instance processed are what Redis is for); without, none, so that the
   * read before BEGIN waits for a run of duplicates.
   */
  constructor(initialShare = 0) {
    this.#share = initialShare;
  }

  /** A delivery that missed the in-process cache turned out a duplicate, or not. */
  note(duplicate: boolean): void {
    this.#share += ((duplicate ? 1 : 0) - this.#share) * WEIGHT;
  }

  /** More likely a duplicate than not: the read before BEGIN pays. */
  get likely(): boolean {
    return this.#share > 0.5;
  }

  /** Duplicates are rare (under one in eight, recently): the Redis GET does not pay. */
  get rare(): boolean {
    return this.#share < RARE;
  }
}
