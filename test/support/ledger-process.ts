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
import { startLedger } from '../../examples/ledger/start.js';
import type { InboxOptions } from '../../src/index.js';

export interface LedgerProcessConfig {
  databaseUrl: string;
  schema: string;
  ledgerSchema: string;
  sweepIntervalMs: number;
  gapTimeoutMs?: number;
  gate?: { key: string; seq: number };
  /** More options for the inbox (deferred mode, workers). */
  inbox?: Partial<InboxOptions>;
}

const config = JSON.parse(process.argv[2]) as LedgerProcessConfig;
const send = (message: object) => process.send?.(message);

const app = await startLedger({
  ledgerSchema: config.ledgerSchema,
  inbox: {
    db: config.databaseUrl,
    schema: config.schema,
    sweepIntervalMs: config.sweepIntervalMs,
    gapTimeoutMs: config.gapTimeoutMs,
    ...config.inbox,
  },
  wrapHandler: (handle) => async (event, context) => {
    const result = await handle(event, context);
    if (config.gate && event.key === config.gate.key && event.seq === config.gate.seq) {
      send({ type: 'gate', id: event.id });
      await new Promise(() => {}); // held open until the test kills this process
    }
    return result;
  },
});
const { inbox } = app;

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
  app.close().then(() => process.exit(0));
});
send({ type: 'ready', url: app.url });
