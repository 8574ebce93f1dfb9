/** LISTEN (pg only) on a dedicated connection; the workers' poll catches lost notifications. */
import type { Database } from '../db/database.js';
import { notifyChannel, readWakeUp } from '../db/sql/notify-pending.js';
import type { Runtime } from '../runtime/runtime.js';

const LISTEN_RETRY_MS = 1000;

interface ListenerClient {
  query(config: { text: string }): Promise<unknown>;
  release(err?: Error | boolean): void;
  on(event: 'notification', listener: (msg: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error' | 'end', listener: (err?: Error) => void): unknown;
  connect?(): Promise<unknown>;
  end?(): Promise<void>;
}

export class Listener {
  readonly #rt: Runtime;
  readonly #wake: (key: string | null) => void;
  #client: ListenerClient | undefined;
  #release: (() => Promise<void>) | undefined;
  #retryTimer: NodeJS.Timeout | undefined;
  #closing = false;

  constructor(rt: Runtime, wake: (key: string | null) => void) {
    this.#rt = rt;
    this.#wake = wake;
  }

  /** With a pg.Pool, a client of its own from the pool's settings; else one pool connection, held. */
  async start(): Promise<void> {
    const rt = this.#rt;
    const pool = rt.database.pool as
      | (NonNullable<Database['pool']> & {
          Client?: new (options: unknown) => ListenerClient;
          options?: unknown;
        })
      | undefined;
    if (!pool || this.#closing) return;
    const channel = notifyChannel(rt.tables, rt.options.source);
    try {
      let client: ListenerClient;
      if (typeof pool.Client === 'function' && pool.options) {
        const own = new pool.Client(pool.options);
        client = own;
        own.on('error', () => {});
        await own.connect?.();
        this.#release = async () => {
          await own.end?.();
        };
      } else {
        const pooled = (await pool.connect()) as ListenerClient;
        client = pooled;
        this.#release = async () => pooled.release(true);
      }
      client.on('notification', (msg) => {
        if (msg.channel === channel) for (const key of readWakeUp(msg.payload)) this.#wake(key);
      });
      const lost = () => {
        if (this.#client !== client) return;
        void this.stop();
        rt.options.logger.warn({}, 'webhook-inbox: LISTEN connection lost; polling until it is back');
        this.#retry();
      };
      client.on('error', lost);
      client.on('end', lost);
      // `wi_` and 32 hex digits: no quoting needed.
      await client.query({ text: `listen ${channel}` });
      this.#client = client;
      if (this.#closing) await this.stop();
      // Events stored while we were not listening: look once.
      this.#wake(null);
    } catch (err) {
      rt.options.logger.warn({ err }, 'webhook-inbox: cannot LISTEN; polling every pollIntervalMs');
      await this.#release?.().catch(() => {});
      this.#release = undefined;
      this.#retry();
    }
  }

  #retry(): void {
    if (this.#closing) return;
    this.#retryTimer = setTimeout(() => void this.start(), LISTEN_RETRY_MS);
    this.#retryTimer.unref();
  }

  async stop(): Promise<void> {
    const release = this.#release;
    this.#client = undefined;
    this.#release = undefined;
    await release?.().catch(() => {});
  }

  async close(): Promise<void> {
    this.#closing = true;
    clearTimeout(this.#retryTimer);
    await this.stop();
  }
}
