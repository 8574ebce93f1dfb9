/**
 * A sender posting a body over `maxBodyBytes` reads its 413 on every framework, however much it
 * is still writing when the answer comes: the inbox drops the rest of the body as it arrives
 * (up to DRAIN_LIMIT_BYTES) instead of closing a connection with unread bytes, which the kernel
 * answers with a reset that discards the 413 (Koa's ledger: EPIPE in 3 of about 20 posts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_FRAMEWORKS, type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { freshPGlite } from './support/databases.js';

const TWO_MIB = Buffer.alloc(2 * 1024 * 1024, 'x');
const POSTS = 10;

/** 2 MiB in 64 KiB chunks, as a sender streaming its body (no Content-Length) writes it. */
function streamed(): ReadableStream<Uint8Array> {
  let offset = 0;
  return new ReadableStream({
    async pull(controller) {
      // A turn of the event loop per chunk: the sender is still writing when the 413 comes.
      await new Promise((resolve) => setImmediate(resolve));
      if (offset >= TWO_MIB.length) return controller.close();
      controller.enqueue(TWO_MIB.subarray(offset, offset + 65_536));
      offset += 65_536;
    },
  });
}

let db: Awaited<ReturnType<typeof freshPGlite>>;
beforeAll(async () => {
  db = await freshPGlite();
});
afterAll(async () => {
  await db.close();
});

describe.each(ALL_FRAMEWORKS)('a 2 MiB body on %s', (framework) => {
  let server: LedgerServer;
  beforeAll(async () => {
    server = await startLedger({
      framework,
      inbox: { db, schema: `big_${framework}`, sweepIntervalMs: 0, maxBodyBytes: 1024 },
    });
  });
  afterAll(async () => {
    await server.close();
  });

  it(`is answered 413, read by the sender every time (${POSTS} declared, ${POSTS} streamed)`, async () => {
    const answers: string[] = [];
    for (let i = 0; i < 2 * POSTS; i++) {
      const init: RequestInit & { duplex?: 'half' } =
        i % 2 === 0 ? { body: TWO_MIB } : { body: streamed(), duplex: 'half' };
      const answer = await fetch(`${server.url}/webhooks`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': `big-${i}` },
        ...init,
      }).then(
        async (res) => `${res.status} ${((await res.json()) as { field?: string }).field}`,
        (err: Error) => `${err.message} (${(err.cause as { code?: string } | undefined)?.code})`,
      );
      answers.push(answer);
    }
    expect(answers).toEqual(Array(2 * POSTS).fill('413 body'));
  });
});
