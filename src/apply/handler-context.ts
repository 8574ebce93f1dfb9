import { createHash } from 'node:crypto';
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, Transaction } from 'kysely';
import { HandlerError, HandlerTimeoutError } from '../errors.js';
import type { Handler, HandlerContext, InboxEvent } from '../options/event.js';

/**
 * A stable key for one outbound call of one event, for APIs that accept `Idempotency-Key`:
 * the same source, event id and name give the same key on every run, in every process, so a
 * handler re-run after a crash or a rollback repeats the call safely. UUID-shaped (version 8,
 * RFC 9562) from SHA-256, so it fits wherever a UUID or an opaque string up to 255 fits.
 */
export function idempotencyKey(source: string, id: string, name: string): string {
  const hex = createHash('sha256')
    .update(JSON.stringify(['webhook-inbox', source, id, name]))
    .digest('hex');
  const variant = ((Number.parseInt(hex[16], 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/**
 * The abort side of one handler run. Its AbortController is made only when the handler reads
 * `ctx.signal` (most never do): one read after the deadline gets a signal already aborted with
 * the timeout, as if it had been made at the start.
 */
class RunAbort {
  #controller: AbortController | undefined;
  /** The timeout, once the run went past it. */
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

/**
 * Refuses queries a timed-out handler still sends through `tx`: its transaction has been
 * rolled back and its connection may already serve someone else.
 */
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

/**
 * Runs the handler with its context. A throw becomes a HandlerError (the caller rolls back and
 * counts the attempt); so does running past `timeoutMs`, after aborting `ctx.signal`. `plugins`
 * are those of the Kysely instance the user passed as `db`, which the inbox's own statements
 * run without (src/db/database.ts): the handler's `tx` has them, as the user's instance would.
 */
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
