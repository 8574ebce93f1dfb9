import type { Outcome } from '../outcome.js';
import type { Runtime } from '../runtime/runtime.js';
import { observed } from './observe.js';
import * as respond from './respond.js';

/** Who waits for the deliveries in flight to settle (`inbox.close()`), per runtime. */
const settleWaiters = new WeakMap<Runtime, Array<() => void>>();

/**
 * Resolves when no delivery is in flight (admitted and not yet answered). `inbox.close()`
 * waits for it before it closes the database, so that a shutdown never fails a delivery it
 * had taken: each one is bounded by `handlerTimeoutMs` and `lockTimeoutMs`.
 */
export function deliveriesSettled(rt: Runtime): Promise<void> {
  if (rt.inFlight === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const waiters = settleWaiters.get(rt) ?? [];
    waiters.push(resolve);
    settleWaiters.set(rt, waiters);
  });
}

/**
 * Sheds the delivery when `maxInFlight` are being received (a counter, no I/O, before the rest
 * of the body is read: reading it is work), or when the inbox is closing, else runs `receive`
 * under the count.
 */
export async function admitted(rt: Runtime, receive: () => Promise<Outcome>): Promise<Outcome> {
  if (rt.closing) return observed(rt, undefined, { parent: undefined }, respond.shed('closing'));
  if (rt.inFlight >= rt.options.maxInFlight) {
    return observed(rt, undefined, { parent: undefined }, respond.shed('in-flight'));
  }
  rt.inFlight++;
  try {
    return await receive();
  } finally {
    rt.inFlight--;
    if (rt.inFlight === 0) {
      const waiters = settleWaiters.get(rt);
      settleWaiters.delete(rt);
      for (const resolve of waiters ?? []) resolve();
    }
  }
}
