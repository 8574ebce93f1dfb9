/**
 * How likely the next delivery that missed the in-process cache is a duplicate (an exponentially
 * weighted average over about the last eight). Looking before BEGIN costs a new event a round trip
 * (or two Redis commands) and saves a duplicate more, so it pays only while duplicates are common:
 * without Redis, p + (1 - p)(n + 3) round trips against 2p + (1 - p)(n + 2), which pays when p > 1/2.
 * A duplicate Postgres answered is written to Redis whatever the odds. The claim still decides.
 */
const WEIGHT = 1 / 8;

export class DuplicateOdds {
  #share = 0;

  note(duplicate: boolean): void {
    this.#share += ((duplicate ? 1 : 0) - this.#share) * WEIGHT;
  }

  get likely(): boolean {
    return this.#share > 0.5;
  }
}
