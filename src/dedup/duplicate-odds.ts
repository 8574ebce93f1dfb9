/**
 * How likely the next delivery that missed the in-process cache is a duplicate: an
 * exponentially weighted average over the recent ones (about the last eight).
 *
 * Why it decides anything: looking before BEGIN costs every new event something and saves a
 * duplicate more, so it pays only while duplicates are common.
 * - Without Redis, a primary-key read before BEGIN (sql/find-processed.ts) answers a processed
 *   duplicate in one round trip, where the claim takes two (BEGIN+claim, COMMIT); for a new
 *   event the read is one round trip wasted. With a share p of duplicates, reading first costs
 *   p + (1 - p)(n + 3) round trips per delivery against 2p + (1 - p)(n + 2) without it: it
 *   pays exactly when p > 1/2.
 * - With Redis, the GET before the claim and the SET after COMMIT cost a new event two Redis
 *   commands, and a duplicate Redis answers saves the claim's two round trips. Both are asked
 *   at the same odds, so that a new event costs Redis nothing while duplicates are rare; a
 *   duplicate Postgres answered is written to Redis whatever the odds, so that the copies after
 *   it (on any instance) find it there once a storm tips the odds.
 * Either way the claim still decides: a look before it only ever answers what the claim would.
 */
const WEIGHT = 1 / 8;

export class DuplicateOdds {
  #share = 0;

  /** A delivery that missed the in-process cache turned out a duplicate, or not. */
  note(duplicate: boolean): void {
    this.#share += ((duplicate ? 1 : 0) - this.#share) * WEIGHT;
  }

  /** More likely a duplicate than not: looking before BEGIN (Redis, or a primary-key read) pays. */
  get likely(): boolean {
    return this.#share > 0.5;
  }
}
