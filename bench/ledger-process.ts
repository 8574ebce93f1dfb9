/**
 * The ledger example in a process of its own, for the benchmarks that load it over HTTP
 * (bench/deferred.ts, bench/ingest-load.ts): the server answers in its own event loop, as
 * `npm run example` does, not in the one that sends the load. Started with its options as JSON
 * (argv[2]); tells its parent `{ type: 'ready', url }`, then `{ type: 'applying', id }` and
 * `{ type: 'applied', id }` around every run of the ledger inbox's handler (`/webhooks`);
 * answers `{ cmd: 'idle' }` (the workers have nothing known to do) and `{ cmd: 'close' }`.
 */
import { type LedgerServerOptions, startLedger } from '../examples/ledger/start.js';
import type { Handler } from '../src/index.js';

const options = JSON.parse(process.argv[2] ?? '{}') as LedgerServerOptions;
const send = (message: object) => process.send?.(message);
const wrapHandler =
  (handle: Handler): Handler =>
  async (event, ctx) => {
    send({ type: 'applying', id: event.id });
    try {
      return await handle(event, ctx);
    } finally {
      send({ type: 'applied', id: event.id });
    }
  };
const app = await startLedger({ ...options, wrapHandler });
process.on('message', async (m: { id: number; cmd: string }) => {
  if (m.cmd === 'idle') await app.inbox.idle();
  if (m.cmd === 'close') await app.close();
  send({ type: 'done', id: m.id });
  if (m.cmd === 'close') process.exit(0);
});
send({
  type: 'ready',
  url: app.url,
  options: {
    poolSize: app.inbox.options.poolSize,
    ackPoolSize: app.inbox.options.ackPoolSize,
    workers: app.inbox.options.workers,
  },
});
