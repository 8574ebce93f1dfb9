/**
 * One NOTIFY after claims commit (never in them: notifying commits serialise cluster-wide), at most one
 * per WAKE_UP_INTERVAL_MS, naming the keys stored meanwhile.
 */

import { notifyChannel, wakeUpPayload } from '../db/sql/notify-pending.js';
import type { Runtime } from '../runtime/runtime.js';

export const WAKE_UP_INTERVAL_MS = 25;
/** A NOTIFY payload stops below 8000 bytes; keys past this wait for the next one. */
const MAX_PAYLOAD_BYTES = 7000;
/** Keys remembered for the next wake-up; past it the sweeper finds the others. */
const MAX_KEYS = 10_000;

export class WakeUps {
  readonly #rt: Runtime;
  readonly #channel: string;
  readonly #keys = new Set<string>();
  #unordered = false;
  #timer: NodeJS.Timeout | undefined;
  #sending = false;
  #lastSentAt = Number.NEGATIVE_INFINITY;
  #closed = false;

  constructor(rt: Runtime) {
    this.#rt = rt;
    this.#channel = notifyChannel(rt.tables, rt.options.source);
  }

  /** A pending event of `key` (null: unordered) was committed. */
  stored(key: string | null): void {
    if (this.#closed) return;
    if (key === null) this.#unordered = true;
    else if (this.#keys.size < MAX_KEYS) this.#keys.add(key);
    this.#schedule();
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (!this.#sending && (this.#unordered || this.#keys.size > 0)) await this.#send();
  }

  #schedule(): void {
    if (this.#timer || this.#sending) return;
    const wait = Math.max(0, this.#lastSentAt + WAKE_UP_INTERVAL_MS - performance.now());
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#send();
    }, wait);
    this.#timer.unref();
  }

  async #send(): Promise<void> {
    const keys: string[] = [];
    let bytes = this.#unordered ? 1 : 0;
    for (const key of this.#keys) {
      if (bytes + key.length + 1 > MAX_PAYLOAD_BYTES) break;
      keys.push(key);
      bytes += key.length + 1;
    }
    const payload = wakeUpPayload(this.#unordered, keys);
    this.#unordered = false;
    for (const key of keys) this.#keys.delete(key);
    this.#sending = true;
    this.#lastSentAt = performance.now();
    const rt = this.#rt;
    try {
      await rt.statements.notifyPending(rt.database.acks, this.#channel, payload);
    } catch (err) {
      // The other instances' poll finds the events: a wake-up is a hint, never needed for safety.
      rt.options.logger.debug({ err }, 'webhook-inbox: could not send a wake-up');
    } finally {
      this.#sending = false;
      if (!this.#closed && (this.#unordered || this.#keys.size > 0)) this.#schedule();
    }
  }
}
