/**
 * A sender process for the restart test: dispatches the outbox at OUTBOX_SCHEMA in
 * DATABASE_URL to ENDPOINT until it is killed. Prints "ready" once its store is open.
 */
import { createSender } from '../../src/sender/index.js';

const sender = createSender({
  endpoint: process.env.ENDPOINT!,
  db: process.env.DATABASE_URL!,
  schema: process.env.OUTBOX_SCHEMA!,
  concurrency: 8,
  timeoutMs: 1000,
  leaseMs: 1500,
  pollIntervalMs: 50,
  baseMs: 5,
  capMs: 50,
  breaker: false,
});
await sender.ready();
process.stdout.write('ready\n');
