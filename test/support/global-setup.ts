import { connect } from 'node:net';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    postgresUrl: string | null;
    redisUrl: string | null;
  }
}

function answers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: 1000 });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

/**
 * Finds the real servers: DATABASE_URL / REDIS_URL, or a server answering on 127.0.0.1.
 * With WEBHOOK_INBOX_REQUIRE_SERVERS=1 (set by .ci/run) a missing server fails the run
 * instead of quietly leaving the suites to PGlite.
 */
export default async function setup(project: TestProject) {
  if (process.env.WEBHOOK_INBOX_SERVERS === 'none') {
    // As on a machine with only Node: PGlite, no servers (what `npm install && npm test` meets there).
    console.log('webhook-inbox tests: PGlite (embedded) only, WEBHOOK_INBOX_SERVERS=none');
    project.provide('postgresUrl', null);
    project.provide('redisUrl', null);
    return;
  }
  const pg =
    process.env.DATABASE_URL ||
    ((await answers('127.0.0.1', 5432)) ? 'postgres://postgres@127.0.0.1:5432/test' : null);
  const redis =
    process.env.REDIS_URL || ((await answers('127.0.0.1', 6379)) ? 'redis://127.0.0.1:6379' : null);
  if (process.env.WEBHOOK_INBOX_REQUIRE_SERVERS === '1' && (!pg || !redis)) {
    throw new Error(`WEBHOOK_INBOX_REQUIRE_SERVERS=1 but ${!pg ? 'PostgreSQL' : 'Redis'} is not reachable`);
  }
  console.log(
    `webhook-inbox tests: PGlite (embedded) always; PostgreSQL ${pg ? `at ${pg.replace(/\/\/[^@]*@/, '//')}` : 'NOT available: real-Postgres suites skipped'}; Redis ${redis ?? 'NOT available'}`,
  );
  project.provide('postgresUrl', pg);
  project.provide('redisUrl', redis);
}
