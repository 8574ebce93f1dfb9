/** `webhook-inbox console`. The token comes from the environment, never an argument (those show in `ps`). */
import { isLoopback, resolveConsoleOptions } from '../console/options.js';
import { serveConsole } from '../console/server.js';
import { InboxOptionsError } from '../errors.js';
import type { Operations } from '../operations/index.js';
import { type Command, EXIT, UsageError, type Values } from './command.js';

export const CONSOLE_TOKEN_ENV = 'WEBHOOK_INBOX_CONSOLE_TOKEN';
export const CONSOLE_SECRET_ENV = 'WEBHOOK_INBOX_CONSOLE_SECRET';

function port(values: Values): number {
  const raw = values.port;
  if (raw === undefined) return 8080;
  if (typeof raw !== 'string' || !/^\d{1,5}$/.test(raw) || Number(raw) > 65535) {
    throw new UsageError(`--port must be an integer from 0 to 65535; got ${JSON.stringify(raw)}`);
  }
  return Number(raw);
}

function settings(values: Values, env: Record<string, string | undefined>) {
  const host = (values.host as string | undefined) ?? '127.0.0.1';
  if (host === '') throw new UsageError('--host must not be empty');
  const token = env[CONSOLE_TOKEN_ENV] || undefined;
  const insecure = values.insecure === true;
  if (token !== undefined && token.length < 16) {
    throw new UsageError(`${CONSOLE_TOKEN_ENV} must be 16 characters or more`);
  }
  if (token === undefined && !insecure) {
    throw new UsageError(
      `set ${CONSOLE_TOKEN_ENV} (16 characters or more) to a secret the operators type in, or pass --insecure to serve without one on a loopback address`,
    );
  }
  if (token !== undefined && insecure)
    throw new UsageError(`--insecure and ${CONSOLE_TOKEN_ENV} exclude each other`);
  if (insecure && !isLoopback(host)) {
    throw new UsageError(`--insecure serves on a loopback address only (127.0.0.1, ::1); got --host ${host}`);
  }
  const secret = env[CONSOLE_SECRET_ENV] || undefined;
  if (secret !== undefined && secret.length < 32) {
    throw new UsageError(
      `${CONSOLE_SECRET_ENV} must be 32 characters or more (e.g. \`openssl rand -hex 32\`)`,
    );
  }
  const hosts = values['allowed-hosts'] as string | undefined;
  const allowedHosts = hosts === undefined ? undefined : hosts.split(',').map((h) => h.trim());
  return {
    host,
    port: port(values),
    token,
    secret,
    insecure,
    readOnly: values['read-only'] === true,
    allowedHosts,
    trustProxy: values['trust-proxy'] === true,
  };
}

export const CONSOLE_COMMAND: Command = {
  summary: 'serve the operator console in the browser (until interrupted)',
  usage:
    'webhook-inbox console [--port 8080] [--host 127.0.0.1] [--read-only] [--insecure] [--allowed-hosts a,b] [--trust-proxy] [options]',
  help:
    `The token is read from $${CONSOLE_TOKEN_ENV}: give it as \`Authorization: Bearer <token>\` or type it into the login form.\n` +
    `Behind several replicas, give each the same $${CONSOLE_SECRET_ENV} (32 characters or more): without it each\n` +
    'process keys its forms and sessions with a random key, and a form posted to another replica is refused.',
  options: {
    port: { type: 'string', help: 'port to listen on (default 8080; 0 picks a free one)' },
    host: { type: 'string', help: 'address to listen on (default 127.0.0.1)' },
    'read-only': { type: 'boolean', help: 'show everything, offer no action' },
    insecure: { type: 'boolean', help: `no token: anyone who reaches it may act; loopback only` },
    'allowed-hosts': {
      type: 'string',
      help: 'Host names it answers to, comma-separated (default: any; with --insecure the loopback names)',
    },
    'trust-proxy': {
      type: 'boolean',
      help: 'behind one reverse proxy: read the client address and https from X-Forwarded-*',
    },
  },
  positionals: [0, 0],
  check({ values, env }) {
    const s = settings(values, env);
    try {
      resolveConsoleOptions({ operations: {} as Operations, ...s, insecure: s.insecure || undefined });
    } catch (err) {
      if (err instanceof InboxOptionsError)
        throw new UsageError(err.message.replace('option `allowedHosts`', '--allowed-hosts'));
      throw err;
    }
  },
  async run({ values, env, io, connection }) {
    const s = settings(values, env);
    const ops = await connection.ops();
    const served = await serveConsole({ operations: ops, ...s, insecure: s.insecure || undefined });
    io.stdout(`webhook-inbox console on ${served.url}/${s.readOnly ? ' (read-only)' : ''}`);
    await (io.untilStopped ?? untilSignal)();
    await served.close();
    return EXIT.ok;
  },
};

function untilSignal(): Promise<void> {
  return new Promise((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
}
