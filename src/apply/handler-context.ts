import { createHash } from 'node:crypto';
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, Transaction } from 'kysely';
import { HandlerError, HandlerTimeoutError } from '../errors.js';
import type { Handler, HandlerContext, InboxEvent } from '../options/event.js';

/** The same key for one outbound call of one event on every run: a UUID v8 from SHA-256. */
export function idempotencyKey(source: string, id: string, name: string): string {
  const hex = createHash('sha256')
    .update(JSON.stringify(['webhook-inbox', source, id, name]))
    .digest('hex');
  const variant = ((Number.parseInt(hex[16], 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/** The abort side of one handler run; its AbortController is made only if the handler reads `ctx.signal`. */
class RunAbort {
  #controller: AbortController | undefined;
  reason: HandlerTimeoutError | undefined;

  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.reason) this.#controller.abort(this.reason);
    }
    return this.#controller.signal;
  }

  abort(reason: HandlerTimeoutError): void {
    this.reason = reason;
    this.#controller?.abort(reason);
  }
}

/** Refuses what a timed-out handler still sends: its connection may already serve someone else. */
class RefuseAfterAbort implements KyselyPlugin {
  constructor(readonly run: RunAbort) {}
  transformQuery(args: PluginTransformQueryArgs) {
    if (this.run.reason) throw this.run.reason;
    return args.node;
  }
  async transformResult(args: PluginTransformResultArgs) {
    return args.result;
  }
}

/** Runs the handler with its context; a throw, or running past `timeoutMs`, becomes a HandlerError. */
export async function runWithContext(
  handle: Handler,
  event: InboxEvent,
  tx: Transaction<any>,
  timeoutMs: number,
  plugins: readonly KyselyPlugin[] = [],
): Promise<unknown> {
  const abort = new RunAbort();
  let handlerTx = tx;
  for (const plugin of plugins) handlerTx = handlerTx.withPlugin(plugin);
  const context: HandlerContext = {
    tx: timeoutMs > 0 ? handlerTx.withPlugin(new RefuseAfterAbort(abort)) : handlerTx,
    get signal() {
      return abort.signal;
    },
    idempotencyKey: (name = 'default') => idempotencyKey(event.source, event.id, String(name)),
  };
  let timer: NodeJS.Timeout | undefined;
  try {
    const run = Promise.resolve().then(() => handle(event, context));
    if (timeoutMs <= 0) return await run;
    return await Promise.race([
      run,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          const err = new HandlerTimeoutError(timeoutMs);
          abort.abort(err);
          // The abandoned run may still settle; nobody waits for it any more.
          run.catch(() => {});
          reject(err);
        }, timeoutMs);
      }),
    ]);
  } catch (err) {
    throw new HandlerError(err);
  } finally {
    clearTimeout(timer);
  }
}
