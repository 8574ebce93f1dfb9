/**
 * A PostgreSQL that shuts down (57P01, "terminating connection due to administrator command")
 * just as a new connection of the inbox's pool becomes ready may send its FATAL in the same
 * packet as the connection's ReadyForQuery. node-postgres then reports it as an 'error' event
 * on a client the pool has just handed out, before any connection of ours holds it: unheard,
 * that event ended the process (the chaos suite's PostgreSQL restarts, once). The server here
 * speaks just enough of the protocol over a real socket to send exactly that packet; the
 * inbox must fail to start, and go on living (an unhandled error fails this run).
 */
import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createInbox } from '../src/index.js';
import { postgresTarget, postgresUrl, uniqueName } from './support/databases.js';

/** One backend message: its type byte, its length (itself included), its body. */
function message(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}

const authenticationOk = message('R', Buffer.from([0, 0, 0, 0]));
const readyForQuery = message('Z', Buffer.from('I', 'latin1'));
const adminShutdown = message(
  'E',
  Buffer.from('SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0', 'latin1'),
);

/** Answers every startup with AuthenticationOk, ReadyForQuery and the FATAL, in one write. */
function shuttingDownServer(): { server: Server; startups: () => number } {
  let startups = 0;
  const server = createServer((socket: Socket) => {
    let buffered = Buffer.alloc(0);
    socket.on('error', () => {});
    socket.on('data', (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      // The startup message: a length, then that many bytes (no type byte).
      if (buffered.length < 4 || buffered.length < buffered.readInt32BE(0)) return;
      startups++;
      socket.end(Buffer.concat([authenticationOk, readyForQuery, adminShutdown]));
    });
  });
  return { server, startups: () => startups };
}

describe('pool clients and a server that shuts down as they connect', () => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.close();
    server = undefined;
  });

  it('a FATAL in the packet that completes a connection fails the start, and the process lives on', async () => {
    const fake = shuttingDownServer();
    server = fake.server;
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as { port: number };
    const inbox = createInbox({
      db: `postgres://inbox@127.0.0.1:${port}/inbox`,
      sweepIntervalMs: 0,
      handle: () => {},
    });
    try {
      await expect(inbox.ready()).rejects.toThrow();
      expect(fake.startups()).toBeGreaterThanOrEqual(1);
      // Still serving: a delivery is answered (503: no database), not a crash.
      const outcome = await inbox.receive({
        headers: { 'idempotency-key': 'a' },
        rawBody: Buffer.from('{}'),
      });
      expect(outcome.status).toBe(503);
    } finally {
      await inbox.close().catch(() => {});
    }
  });
});

describe.runIf(postgresTarget)('inboxes sharing one pg pool', () => {
  it('listen for its new clients once, however many share it (no MaxListenersExceededWarning)', async () => {
    const pool = new pg.Pool({ connectionString: postgresUrl!, max: 4 });
    const schema = uniqueName('wi');
    const inboxes = Array.from({ length: 12 }, (_, i) =>
      createInbox({ db: pool, schema, source: `s${i}`, sweepIntervalMs: 0, handle: () => {} }),
    );
    try {
      await Promise.all(inboxes.map((inbox) => inbox.ready()));
      expect(pool.listenerCount('connect')).toBe(1);
    } finally {
      await Promise.all(inboxes.map((inbox) => inbox.close()));
      await pool.query(`drop schema if exists "${schema}" cascade`);
      await pool.end();
    }
  });
});
