/**
 * How likely the next delivery that missed the in-process cache is a duplicate (a moving average
 * over about the last eight). Looking before BEGIN costs a new event a round trip and saves a
 * duplicate one: it pays when p > 1/2.
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
