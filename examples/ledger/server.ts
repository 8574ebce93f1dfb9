/**
 * `npm run example`: the ledger behind the inbox. Configured by environment variables:
 * PORT (3000), DATABASE_URL (required with NODE_ENV=production; otherwise an in-memory
 * embedded PGlite when absent), FRAMEWORK (express | express4 | koa | fastify | hono | fetch),
 * GAP_TIMEOUT_MS, SWEEP_INTERVAL_MS, REDIS_URL (turns the Redis fast path for duplicates on),
 * WEBHOOK_SECRET (Standard Webhooks verification, `whsec_…`),
 * INBOX_MODE (inline | deferred), HANDLER_DELAY_MS (a slow handler: each run waits this long), WORKERS,
 * PROVIDER (a preset of webhook-inbox/providers, with WEBHOOK_SECRET its signing secret),
 * ORDER (seq | latest: latest-wins per object, its key and version from the PROVIDER's preset;
 * try it with PROVIDER=stripe and examples/ledger/send-stripe.ts),
 * LEDGER_TEST_HOOKS=1 (serve POST /fail-next, which makes the handler throw: never in production).
 * GET /metrics serves the inbox's Prometheus metrics (and Node's own).
 * POST /webhooks/ingest and GET /ledger/verify serve the ingest contract (ingest.ts,
 * docs/body-sourced-events.md), with the same GAP_TIMEOUT_MS and SWEEP_INTERVAL_MS.
 * CONSOLE_TOKEN (16 characters or more) serves the operator console at /console behind it.
 */
import { collectDefaultMetrics, Registry } from 'prom-client';
import { InboxOptionsError } from '../../src/index.js';
import { type Framework, providerFromEnv, startLedger, verifyFromEnv } from './start.js';

function intEnv(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return undefined;
  if (!/^\d+$/.test(raw)) {
    console.error(`${name} must be a non-negative integer; got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return Number(raw);
}

const registry = new Registry();
collectDefaultMetrics({ register: registry });
function modeEnv(): 'inline' | 'deferred' | undefined {
  const raw = process.env.INBOX_MODE;
  if (raw === undefined || raw === '') return undefined;
  if (raw !== 'inline' && raw !== 'deferred') {
    console.error(`INBOX_MODE must be inline or deferred; got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return raw;
}

function orderEnv(): { policy: 'latest' } | undefined {
  const raw = process.env.ORDER;
  if (raw === undefined || raw === '' || raw === 'seq') return undefined;
  if (raw !== 'latest') {
    console.error(`ORDER must be seq or latest; got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  // The key and version come from the provider's preset (PROVIDER=stripe: data.object.id, created).
  return { policy: 'latest' };
}

const ledger = await startLedger({
  framework: (process.env.FRAMEWORK ?? 'express') as Framework,
  port: intEnv('PORT') ?? 3000,
  inbox: {
    db: process.env.DATABASE_URL || undefined,
    gapTimeoutMs: intEnv('GAP_TIMEOUT_MS'),
    sweepIntervalMs: intEnv('SWEEP_INTERVAL_MS'),
    redis: process.env.REDIS_URL || undefined,
    metrics: { registry },
    verify: verifyFromEnv(),
    provider: providerFromEnv(),
    mode: modeEnv(),
    order: orderEnv(),
    workers: intEnv('WORKERS'),
  },
  handlerDelayMs: intEnv('HANDLER_DELAY_MS'),
}).catch((err) => {
  if (err instanceof InboxOptionsError && err.option === 'db') {
    // NODE_ENV=production and no DATABASE_URL: the inbox refuses to run in memory.
    console.error(
      'ledger: DATABASE_URL is not set. With NODE_ENV=production the ledger needs PostgreSQL: ' +
        'set DATABASE_URL=postgres://user:password@host:5432/db (without NODE_ENV=production it runs in memory).',
    );
  } else console.error(`ledger: could not start: ${err.message}`);
  process.exit(1);
});
console.log(
  `ledger listening on ${ledger.url} (${process.env.DATABASE_URL ? 'PostgreSQL' : 'embedded PGlite'}, ${ledger.inbox.options.mode} mode${process.env.REDIS_URL ? ', Redis fast path on' : ''}${process.env.PROVIDER ? `, ${process.env.PROVIDER} signatures required` : process.env.WEBHOOK_SECRET ? ', Standard Webhooks signatures required' : ''}${ledger.inbox.options.order.policy === 'latest' ? ', latest wins' : ''}${process.env.CONSOLE_TOKEN ? `; console at ${ledger.url}/console` : ''})`,
);
// Graceful: requests in flight are answered, handlers finish or roll back, workers and the
// sweeper stop, then the process exits 0. A second signal exits at once.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    ledger.shutdown().then(
      () => process.exit(0),
      (err) => {
        console.error(`ledger: shutdown failed: ${err.message}`);
        process.exit(1);
      },
    );
    process.once(signal, () => process.exit(1));
  });
}
