/**
 * The ledger example in a process of its own (forkReady in bench/server-process.ts), so that it
 * answers in its own event loop as `npm run example` does. Options: argv[2] as JSON. It sends
 * `ready` (url, options), `applying`/`applied` around every handler, and answers `idle`, `close`.
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
  send({ id: m.id, value: null });
  if (m.cmd === 'close') process.exit(0);
});
const { poolSize, ackPoolSize, workers } = app.inbox.options;
send({ type: 'ready', url: app.url, options: { poolSize, ackPoolSize, workers } });
