/**
 * One app instance of the chaos suite: the ledger example on Express, Koa or Fastify, configured
 * by the environment (bench/chaos.ts), in its own process to be SIGKILLed. It tells how many
 * handlers and drains run now, so that a kill can be aimed.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { type Framework, startLedger } from '../examples/ledger/start.js';
import type { Delivery } from '../src/index.js';

const env = process.env;
const request = new AsyncLocalStorage<string>();
const inflight = { handlers: 0, drains: 0 };
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
    redis: env.REDIS_URL || undefined,
    redisPrefix: `${env.INBOX_SCHEMA}:`,
    ...(env.RETENTION_MS ? { retention: Number(env.RETENTION_MS) } : {}),
    ...(env.CITUS ? { citus: {} } : {}),
  },
  wrapHandler: (handle) => async (event, context) => {
    // The delivery's own event runs in its context (`receive` below); any other is a drain's.
    const kind = request.getStore() === event.id ? 'handlers' : 'drains';
    inflight[kind]++;
    try {
      if (delayMs > 0) await new Promise((r) => setTimeout(r, Math.random() * delayMs));
      // Unordered events carry their account in the body, so they do not all queue on one row.
      return await handle({ ...event, key: event.key ?? event.body?.account ?? 'none' }, context);
    } finally {
      inflight[kind]--;
    }
  },
});
// Every adapter ends in `inbox.receive` or `inbox.receiveStream`: run them in a context that
// names the delivery's event (adapters pass header lists unjoined).
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
  if (m.cmd === 'inflight') process.send?.({ id: m.id, ...inflight });
});
process.on('disconnect', () => process.exit(0));
process.on('SIGTERM', () => {
  app.close().then(() => process.exit(0));
});
