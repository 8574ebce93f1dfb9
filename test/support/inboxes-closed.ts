/**
 * Runs before every test file (vitest's setupFiles). An inbox starts at construction: it opens
 * its database and runs its sweeper and workers. One that a test created and never closed (an
 * options check that did not throw, a type test) would keep running in the worker, and a worker
 * runs the next files too (vitest.config.ts), spending their CPU. Every inbox a file created is
 * closed when the file ends, after the file's own hooks.
 */
import { afterAll } from 'vitest';
import { Inbox } from '../../src/inbox/inbox.js';

/** The inboxes started since the last file ended; shared by every file a worker runs. */
const run = globalThis as { webhookInboxStarted?: Set<Inbox> };
run.webhookInboxStarted ??= new Set<Inbox>();
const started = run.webhookInboxStarted;

// `ready()` is what the constructor's eager start calls: the one place every inbox passes.
const TRACKED = Symbol.for('webhook-inbox.test.tracked');
const proto = Inbox.prototype as Inbox & { [TRACKED]?: true };
if (!proto[TRACKED]) {
  const ready = proto.ready;
  proto.ready = function (this: Inbox) {
    started.add(this);
    return ready.call(this);
  };
  proto[TRACKED] = true;
}

afterAll(async () => {
  const open = [...started];
  started.clear();
  // An inbox whose database the file already closed may fail to close: it is stopped either way.
  await Promise.all(open.map((inbox) => inbox.close().catch(() => {})));
});
