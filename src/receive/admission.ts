import type { Outcome } from '../outcome.js';
import type { Runtime } from '../runtime/runtime.js';
import { observed } from './observe.js';
import * as respond from './respond.js';

const settleWaiters = new WeakMap<Runtime, Array<() => void>>();

/** Resolves when no delivery is in flight: `inbox.close()` waits for it before closing the database. */
export function deliveriesSettled(rt: Runtime): Promise<void> {
  if (rt.inFlight === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const waiters = settleWaiters.get(rt) ?? [];
    waiters.push(resolve);
    settleWaiters.set(rt, waiters);
  });
}

/** Sheds the delivery at `maxInFlight` (a counter, before the body is read) or while closing. */
export async function admitted(rt: Runtime, receive: () => Promise<Outcome>): Promise<Outcome> {
  if (rt.closing || rt.inFlight >= rt.options.maxInFlight) {
    return observed(rt, undefined, { parent: undefined }, respond.shed(rt.closing ? 'closing' : 'in-flight'));
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
