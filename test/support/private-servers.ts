/**
 * Servers of a test's own, to stop and restart: the shared PostgreSQL (5432) and Redis (6379)
 * serve every other test file, so a fault test never touches them. A private Redis is a child
 * `redis-server` on a free port; a private PostgreSQL is a throwaway cluster (`initdb` into a
 * temporary directory, `pg_ctl` on a free port), run as the `postgres` user when the tests
 * run as root (initdb refuses root). Both are removed by `destroy()`.
 *
 * Used by the fault tests (test/fault-*.test.ts) and the chaos suite (bench/chaos.ts).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** A TCP port nothing listens on right now. */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export interface PrivateRedis {
  readonly url: string;
  /** Kills the server (SIGKILL: as abrupt as a crash) and waits for it to exit. */
  stop(): Promise<void>;
  /** Starts it again on the same port (empty: it saves nothing). */
  start(): Promise<void>;
  destroy(): Promise<void>;
}

export function redisServerAvailable(): boolean {
  return ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].some((p) => existsSync(p));
}

export async function startPrivateRedis(): Promise<PrivateRedis> {
  const port = await freePort();
  let child: ChildProcess | undefined;
  const start = async () => {
    const proc = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--daemonize',
        'no',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child = proc;
    await new Promise<void>((resolve, reject) => {
      let out = '';
      proc.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (out.includes('Ready to accept connections')) resolve();
      });
      proc.once('exit', (code) => reject(new Error(`redis-server exited (${code}): ${out.slice(-500)}`)));
    });
    proc.stdout!.resume();
  };
  const stop = async () => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null) return;
    const exited = once(proc, 'exit');
    proc.kill('SIGKILL');
    await exited;
  };
  await start();
  return { url: `redis://127.0.0.1:${port}`, start, stop, destroy: stop };
}

export interface PrivatePostgres {
  /** `postgres://postgres@127.0.0.1:<port>/postgres`, trust authentication. */
  readonly url: string;
  /** `pg_ctl restart -m fast`: every connection is terminated, the server is back when it resolves. */
  restart(): Promise<void>;
  stop(): Promise<void>;
  start(): Promise<void>;
  destroy(): Promise<void>;
}

const PG_BIN = [
  '/usr/lib/postgresql/17/bin',
  '/usr/lib/postgresql/16/bin',
  '/usr/lib/postgresql/15/bin',
].find((dir) => existsSync(join(dir, 'initdb')));

export function postgresBinariesAvailable(): boolean {
  return PG_BIN !== undefined;
}

/** Runs a PostgreSQL binary, as the `postgres` user when this process is root. */
async function pgRun(tool: string, args: string[]): Promise<void> {
  const bin = join(PG_BIN!, tool);
  if (process.getuid?.() === 0) await run('runuser', ['-u', 'postgres', '--', bin, ...args]);
  else await run(bin, args);
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  if (!PG_BIN) throw new Error('PostgreSQL server binaries (initdb, pg_ctl) are not installed');
  const dir = await mkdtemp(join(tmpdir(), 'wi-pg-'));
  if (process.getuid?.() === 0) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    await chown(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  const data = join(dir, 'data');
  const port = await freePort();
  await pgRun('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8']);
  // Durability off: a throwaway cluster; a restart still terminates every backend.
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`;
  const ctl = (...args: string[]) =>
    pgRun('pg_ctl', ['-D', data, '-l', join(dir, 'log'), '-w', '-t', '60', ...args]);
  await ctl('-o', options, 'start');
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    restart: () => ctl('-o', options, '-m', 'fast', 'restart'),
    stop: () => ctl('-m', 'fast', 'stop'),
    start: () => ctl('-o', options, 'start'),
    destroy: async () => {
      await ctl('-m', 'immediate', 'stop').catch(() => {});
      await rm(dir, { recursive: true, force: true });
    },
  };
}
