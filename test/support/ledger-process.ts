/**
 * One app instance in a process of its own, for the multi-process and crash tests: the ledger
 * example's Express app and an inbox on a real Postgres schema, listening on port 0.
 * Started with `fork(thisFile, { execArgv: ['--import', 'tsx'] })` (not the `tsx` binary: it
 * runs the script in a grandchild, and a SIGKILL would then hit the wrong process).
 *
 * Configured by one JSON argument (`LedgerProcessConfig`). Talks to the test over IPC:
 * - sends `{ type: 'ready', url }` once it listens;
 * - with `gate` set, the handler run of that event writes its ledger entry, sends
 *   `{ type: 'gate', id }` and never returns: the test kills the process at that point, in the
 *   middle of the event's transaction, deterministically;
 * - answers `{ type: 'idle' }` (waits for its drains) and `{ type: 'sweep' }` (one sweeper
 *   pass) with `{ type: 'done', of, report? }`.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expressApp } from '../../examples/ledger/app-express.js';
import { Ledger } from '../../examples/ledger/ledger.js';
import { createInbox } from '../../src/index.js';

export interface LedgerProcessConfig {
  databaseUrl: string;
  schema: string;
  ledgerSchema: string;
  sweepIntervalMs: number;
  gapTimeoutMs?: number;
  gate?: { key: string; seq: number };
}

const config = JSON.parse(process.argv[2]) as LedgerProcessConfig;
const send = (message: object) => process.send?.(message);

const ledger = new Ledger(config.ledgerSchema);
const inbox = createInbox({
  db: config.databaseUrl,
  schema: config.schema,
  sweepIntervalMs: config.sweepIntervalMs,
  gapTimeoutMs: config.gapTimeoutMs,
  handle: async (event, context) => {
    const result = await ledger.handle(event, context);
    if (config.gate && event.key === config.gate.key && event.seq === config.gate.seq) {
      send({ type: 'gate', id: event.id });
      await new Promise(() => {}); // held open until the test kills this process
    }
    return result;
  },
});
await ledger.setup(await inbox.kysely());
const server = createServer(expressApp(inbox, ledger));
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));

process.on('message', async (message: { type: string }) => {
  if (message.type === 'idle') {
    await inbox.idle();
    send({ type: 'done', of: 'idle' });
  } else if (message.type === 'sweep') {
    const report = await inbox.sweep();
    await inbox.idle();
    send({ type: 'done', of: 'sweep', report });
  }
});
process.on('disconnect', () => {
  server.closeAllConnections();
  server.close();
  inbox.close().then(() => process.exit(0));
});
send({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
