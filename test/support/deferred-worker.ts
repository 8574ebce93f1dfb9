/**
 * A worker process for the SIGKILL test: a deferred inbox on the test's schema that applies
 * the ledger's events, and hangs (mid-transaction, after the ledger insert) on seq HANG_SEQ.
 * Prints `ready` once listening and `hanging <id>` when it is stuck; the test then SIGKILLs it.
 */

import { Ledger } from '../../examples/ledger/ledger.js';
import { createInbox } from '../../src/index.js';

const env = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
};
const ledger = new Ledger(env('APP_SCHEMA'));
const hangSeq = Number(env('HANG_SEQ'));
// Grouped (option groups, one handler per group at once): it also hangs on the event HANG_ID.
const groupBy = process.env.GROUP_BY;
const inbox = createInbox({
  db: env('DATABASE_URL'),
  schema: env('INBOX_SCHEMA'),
  mode: 'deferred',
  workers: 1,
  sweepIntervalMs: 50,
  pollIntervalMs: 50,
  handlerTimeoutMs: 0,
  ...(groupBy ? { groups: { by: groupBy, concurrency: 1 } } : {}),
  async handle(event, ctx) {
    const result = await ledger.handle(event, ctx);
    if (event.seq === hangSeq || event.id === process.env.HANG_ID) {
      process.stdout.write(`hanging ${event.id}\n`);
      await new Promise(() => {});
    }
    return result;
  },
});
await inbox.ready();
process.stdout.write('ready\n');
