/**
 * `webhook-inbox/console`: an operator console in the browser for one inbox database. Every action is
 * a POST with a same-origin check and a CSRF token, logged with who did it.
 *
 * ```ts
 * app.use('/console', expressConsole({ inbox, token: process.env.CONSOLE_TOKEN }));
 * ```
 */
export { type Console, createConsole, MAX_FORM_BYTES } from './console.js';
export { escapeHtml, Html, html } from './html.js';
export { type ConsoleInput, expressConsole, fastifyConsole, koaConsole, nodeConsole } from './mount.js';
export type { ConsoleOptions, ConsoleUser, ResolvedConsoleOptions } from './options.js';
export { resolveConsoleOptions } from './options.js';
export type { ConsoleRequest, ConsoleResponse } from './request.js';
export { type ServeConsoleOptions, type ServedConsole, serveConsole } from './server.js';
