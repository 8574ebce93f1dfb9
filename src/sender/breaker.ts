/** Circuit breaker states (a frozen map, not an enum). */
export const BreakerState = Object.freeze({
  closed: 'closed',
  open: 'open',
  halfOpen: 'half-open',
} as const);
export type BreakerState = (typeof BreakerState)[keyof typeof BreakerState];

/**
 * One breaker per endpoint: after `failureThreshold` consecutive failures it opens and nothing is
 * sent for `cooldownMs`, so a consumer that is down is not hammered by every key's retries; then one
 * probe goes. "Later" answers do not move the count: the consumer is up and paces that one event.
 */
export class Breaker {
  #state: BreakerState = BreakerState.closed;
  #failures = 0;
  #openedAt = 0;
  #probing = false;

  constructor(
    readonly failureThreshold: number,
    readonly cooldownMs: number,
    readonly onChange: (state: BreakerState) => void,
    readonly now: () => number = Date.now,
  ) {}

  get state(): BreakerState {
    return this.#state;
  }

  /** How many deliveries may start now, out of `wanted`. Moves open → half-open when the cool-down is over. */
  room(wanted: number): number {
    if (this.#state === BreakerState.open && this.now() - this.#openedAt >= this.cooldownMs) {
      this.#set(BreakerState.halfOpen);
    }
    if (this.#state === BreakerState.closed) return wanted;
    if (this.#state === BreakerState.halfOpen) return this.#probing ? 0 : Math.min(1, wanted);
    return 0;
  }

  /** A delivery starts. Returns true when it is the half-open probe. */
  started(): boolean {
    if (this.#state !== BreakerState.halfOpen) return false;
    this.#probing = true;
    return true;
  }

  /** Milliseconds until an open breaker lets a probe through, or undefined. */
  msUntilProbe(): number | undefined {
    if (this.#state !== BreakerState.open) return undefined;
    return Math.max(0, this.#openedAt + this.cooldownMs - this.now());
  }

  /** The endpoint answered (2xx, or a 4xx that is about the event, not the endpoint). */
  success(): void {
    this.#failures = 0;
    this.#probing = false;
    if (this.#state !== BreakerState.closed) this.#set(BreakerState.closed);
  }

  /** A "later" answer: the endpoint is alive (a probe's answer closes), but the failure count stays. */
  answered(): void {
    if (this.#state === BreakerState.halfOpen) this.success();
  }

  failure(): void {
    this.#failures++;
    if (this.#state === BreakerState.halfOpen) {
      this.#probing = false;
      this.#open();
    } else if (this.#state === BreakerState.closed && this.#failures >= this.failureThreshold) {
      this.#open();
    }
  }

  #open(): void {
    this.#openedAt = this.now();
    this.#set(BreakerState.open);
  }

  #set(state: BreakerState): void {
    this.#state = state;
    this.onChange(state);
  }
}
