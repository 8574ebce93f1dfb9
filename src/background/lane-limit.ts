/**
 * How many lanes may take unordered batches at once. A batch holds the row locks its handlers
 * take until it commits, so lanes whose handlers write the same rows wait on one another: more
 * lanes then make each event slower without applying more. The limit follows the time an event
 * takes against the fastest seen lately (a gradient, as in TCP Vegas): while it holds, the limit
 * grows to every lane (a slow handler that waits on I/O keeps them all); as it rises, it shrinks.
 */
export class LaneLimit {
  readonly #most: number;
  #limit: number;
  /** The fastest per-event time lately; it drifts up so that a handler that became slower is the new normal. */
  #fastestMs = 0;

  constructor(most: number) {
    this.#most = most;
    this.#limit = most;
  }

  /** The lanes that may take a batch now (at least one). */
  get lanes(): number {
    return Math.max(1, Math.round(this.#limit));
  }

  /** A batch of `taken` events took `elapsedMs`, from its take to its commit. */
  observe(elapsedMs: number, taken: number): void {
    if (taken === 0) return;
    const perEvent = elapsedMs / taken;
    this.#fastestMs = this.#fastestMs === 0 ? perEvent : Math.min(perEvent, this.#fastestMs * 1.01);
    const gradient = Math.min(1, Math.max(0.25, this.#fastestMs / Math.max(perEvent, 1e-3)));
    const next = this.#limit * gradient + Math.sqrt(this.#limit);
    this.#limit = Math.min(this.#most, Math.max(1, 0.8 * this.#limit + 0.2 * next));
  }
}
