/** Thin adapters from Node's http, Express, Koa and Fastify to the console's core; none decides anything. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { type Console, createConsole, MAX_FORM_BYTES } from './console.js';
import type { ConsoleOptions } from './options.js';
import type { ConsoleRequest, ConsoleResponse } from './request.js';

/** A console made with `createConsole`, or the options to make one. */
export type ConsoleInput = Console | ConsoleOptions;

function consoleOf(input: ConsoleInput): Console {
  return typeof (input as Console).handle === 'function'
    ? (input as Console)
    : createConsole(input as ConsoleOptions);
}

/** '' without a body, undefined past MAX_FORM_BYTES. */
async function readBody(req: IncomingMessage, parsed?: unknown): Promise<string | undefined> {
  if (req.method !== 'POST') return '';
  // A body parser ran before the console (express.urlencoded, @koa/bodyparser): use its result.
  if (req.readableEnded || req.readableDidRead) {
    if (parsed && typeof parsed === 'object') {
      const params = new URLSearchParams();
      for (const [name, value] of Object.entries(parsed as Record<string, unknown>)) {
        for (const v of Array.isArray(value) ? value : [value]) params.append(name, String(v));
      }
      return params.toString();
    }
    return typeof parsed === 'string' ? parsed : '';
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_FORM_BYTES) return undefined;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function requestOf(
  req: IncomingMessage,
  url: string,
  basePath: string,
  body: string,
  secure = (req.socket as TLSSocket).encrypted === true,
): ConsoleRequest {
  return {
    secure,
    method: req.method ?? 'GET',
    url: url || '/',
    headers: req.headers,
    body,
    basePath,
    localAddress: req.socket.localAddress,
    remoteAddress: req.socket.remoteAddress,
    raw: req,
  };
}

function write(res: ServerResponse, response: ConsoleResponse): void {
  res.writeHead(response.status, response.headers);
  res.end(response.body);
}

const TOO_LARGE: ConsoleResponse = {
  status: 413,
  headers: { 'content-type': 'text/plain; charset=utf-8', connection: 'close' },
  body: 'form too large',
};

/** A Node `(req, res)` listener serving the console at `basePath` ('' for the whole server). */
export function nodeConsole(input: ConsoleInput, basePath = '') {
  const app = consoleOf(input);
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    let url = req.url ?? '/';
    if (basePath && url.startsWith(basePath)) url = url.slice(basePath.length) || '/';
    const body = await readBody(req);
    write(res, body === undefined ? TOO_LARGE : await app.handle(requestOf(req, url, basePath, body)));
  };
}

/** Express middleware: `app.use('/console', expressConsole({ inbox, authorize }))`, before or after a body parser. */
export function expressConsole(input: ConsoleInput) {
  const app = consoleOf(input);
  return (req: any, res: any, next: (err?: unknown) => void): void => {
    (async () => {
      const body = await readBody(req, req.body);
      if (body === undefined) return write(res, TOO_LARGE);
      // req.secure honours Express's `trust proxy` setting (X-Forwarded-Proto).
      write(res, await app.handle(requestOf(req, req.url, req.baseUrl ?? '', body, req.secure === true)));
    })().catch(next);
  };
}

/** Koa middleware for every path under `prefix`: `app.use(koaConsole({ inbox, token }, '/console'))`. */
export function koaConsole(input: ConsoleInput, prefix = '/console') {
  const app = consoleOf(input);
  return async (ctx: any, next: () => Promise<unknown>): Promise<void> => {
    const path: string = ctx.path;
    if (path !== prefix && !path.startsWith(`${prefix}/`)) return void (await next());
    const body = await readBody(ctx.req, ctx.request.body);
    if (body === undefined) {
      ctx.status = 413;
      ctx.body = 'form too large';
      return;
    }
    const response = await app.handle(
      requestOf(ctx.req, ctx.url.slice(prefix.length) || '/', prefix, body, ctx.secure === true),
    );
    ctx.status = response.status;
    ctx.set(response.headers);
    ctx.body = response.body;
  };
}

/** A Fastify plugin (`app.register(fastifyConsole, { console, prefix })`) that reads form bodies itself. */
export async function fastifyConsole(
  instance: any,
  opts: { console: ConsoleInput; prefix?: string },
): Promise<void> {
  const app = consoleOf(opts.console);
  // The full prefix, parents' included (what the browser's paths start with).
  const basePath: string = instance.prefix || opts.prefix || '';
  instance.removeAllContentTypeParsers();
  instance.addContentTypeParser(
    '*',
    { parseAs: 'string', bodyLimit: MAX_FORM_BYTES },
    (_req: unknown, body: string, done: (err: null, body: string) => void) => done(null, body),
  );
  const handler = async (request: any, reply: any) => {
    const raw: IncomingMessage = request.raw;
    const url = (raw.url ?? '/').slice(basePath.length) || '/';
    const body = typeof request.body === 'string' ? request.body : '';
    const response = await app.handle(requestOf(raw, url, basePath, body, request.protocol === 'https'));
    reply.code(response.status).headers(response.headers).send(response.body);
  };
  const method = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH'];
  for (const url of ['/', '/*']) instance.route({ method, url, handler, exposeHeadRoute: false });
}
