import type { SendResult } from './reports.js';

export interface Waiter {
  readonly promise: Promise<SendResult>;
  resolve(result: SendResult): void;
  reject(err: Error): void;
}

export class SendWaiters {
  readonly #byId = new Map<string, Set<Waiter>>();

  add(id: string): Waiter {
    let resolve!: (r: SendResult) => void;
    let reject!: (e: Error) => void;
    const promise = new Promise<SendResult>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    const remove = () => {
      const set = this.#byId.get(id);
      set?.delete(waiter);
      if (set?.size === 0) this.#byId.delete(id);
    };
    const waiter: Waiter = {
      promise,
      resolve: (r) => {
        remove();
        resolve(r);
      },
      reject: (e) => {
        remove();
        reject(e);
      },
    };
    const set = this.#byId.get(id) ?? new Set();
    set.add(waiter);
    this.#byId.set(id, set);
    return waiter;
  }

  settle(id: string, result: SendResult): void {
    for (const w of [...(this.#byId.get(id) ?? [])]) w.resolve(result);
  }

  rejectAll(err: Error): void {
    for (const set of [...this.#byId.values()]) for (const w of [...set]) w.reject(err);
  }
}
