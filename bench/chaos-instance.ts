/**
 * One app instance of the chaos suite: the ledger example (examples/ledger) on Express, Koa or
 * Fastify, behind the inbox on real PostgreSQL, in its own process so that it can be SIGKILLed.
 * Configured by the environment (see bench/chaos.ts). Tells the parent over IPC how many
 * handlers and drains are running right now, so that a kill can be aimed mid-handler or
 * mid-drain.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { type Framework, startLedger } from '../examples/ledger/start.js';
import type { Delivery } from '../src/index.js';

const env = process.env;
const request = new AsyncLocalStorage<string>();
let handlers = 0;
let drains = 0;
const delayMs = Number(env.HANDLER_DELAY_MS ?? 0);

const app = await startLedger({
  framework: (env.FRAMEWORK ?? 'express') as Framework,
  port: Number(env.PORT),
  ledgerSchema: env.LEDGER_SCHEMA,
  inbox: {
    db: env.DATABASE_URL!,
    schema: env.INBOX_SCHEMA,
    poolSize: Number(env.POOL_SIZE ?? 5),
    gapTimeoutMs: Number(env.GAP_TIMEOUT_MS ?? 20_000),
    sweepIntervalMs: Number(env.SWEEP_INTERVAL_MS ?? 250),
    maxAttempts: Number(env.MAX_ATTEMPTS ?? 3),
    lockTimeoutMs: 2000,
    // Deferred beside inline on the same tables: acknowledgements in batches, workers apply.
    ...(env.MODE === 'deferred' ? { mode: 'deferred' as const, workers: 2 } : {}),
    retryBaseMs: 50,
    retryCapMs: 500,
    // The chaos suite's private Redis, stopped and restarted among the faults.
    redis: env.REDIS_URL || undefined,
    redisPrefix: `${env.INBOX_SCHEMA}:`,
    // The soak's short retention (bench/chaos.ts --retention-s), pruning during the run.
    ...(env.RETENTION_MS ? { retention: Number(env.RETENTION_MS) } : {}),
  },
  wrapHandler: (handle) => async (event, context) => {
    // The delivery's own event runs in the delivery's context (see `receive` below); any other
    // event is being applied by a drain (after a response, or by the sweeper).
    const inDrain = request.getStore() !== event.id;
    if (inDrain) drains++;
    else handlers++;
    try {
      if (delayMs > 0) await new Promise((r) => setTimeout(r, Math.random() * delayMs));
      // Unordered events carry their account in the body, so they do not all queue on one row.
      return await handle({ ...event, key: event.key ?? event.body?.account ?? 'none' }, context);
    } finally {
      if (inDrain) drains--;
      else handlers--;
    }
  },
});
// Every adapter ends in `inbox.receive` or `inbox.receiveStream`: run them in a context that
// names the delivery's event. Adapters pass header lists unjoined (`headersDistinct`).
const idOf = (headers: Delivery['headers']) => {
  const id = headers['idempotency-key'];
  return typeof id === 'string' ? id : (id?.[0] ?? '');
};
const receive = app.inbox.receive.bind(app.inbox);
app.inbox.receive = (delivery: Delivery) => request.run(idOf(delivery.headers), () => receive(delivery));
const receiveStream = app.inbox.receiveStream.bind(app.inbox);
app.inbox.receiveStream = (headers, stream) =>
  request.run(idOf(headers), () => receiveStream(headers, stream));
process.send?.({ type: 'ready' });

process.on('message', (m: { cmd: string; id: number }) => {
  if (m.cmd === 'inflight') process.send?.({ id: m.id, handlers, drains });
});
process.on('disconnect', () => process.exit(0));
process.on('SIGTERM', () => {
  app.close().then(() => process.exit(0));
});
