/** How likely the next cache miss is a duplicate (moving average): looking before BEGIN pays when p > 1/2. */
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
