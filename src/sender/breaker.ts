/** Circuit breaker states (a frozen map, not an enum). */
export const BreakerState = Object.freeze({
  closed: 'closed',
  open: 'open',
  halfOpen: 'half-open',
} as const);
export type BreakerState = (typeof BreakerState)[keyof typeof BreakerState];

/** After `failureThreshold` failures in a row nothing is sent for `cooldownMs`, then one probe. */
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

  /** How many deliveries may start now, out of `wanted`. */
  room(wanted: number): number {
    if (this.#state === BreakerState.open && this.now() - this.#openedAt >= this.cooldownMs) {
      this.#set(BreakerState.halfOpen);
    }
    if (this.#state === BreakerState.closed) return wanted;
    if (this.#state === BreakerState.halfOpen) return this.#probing ? 0 : Math.min(1, wanted);
    return 0;
  }

  /** A delivery starts; true when it is the half-open probe. */
  started(): boolean {
    if (this.#state !== BreakerState.halfOpen) return false;
    this.#probing = true;
    return true;
  }

  msUntilProbe(): number | undefined {
    if (this.#state !== BreakerState.open) return undefined;
    return Math.max(0, this.#openedAt + this.cooldownMs - this.now());
  }

  /** 2xx, or a 4xx about the event, not the endpoint. */
  success(): void {
    this.#failures = 0;
    this.#probing = false;
    if (this.#state !== BreakerState.closed) this.#set(BreakerState.closed);
  }

  /** A "later" answer: a probe's closes, but the failure count stays. */
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
