/** A pino-shaped logger. Every method is optional to call; the inbox is silent without one. */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/**
 * The logger an inbox writes to: the given one's four methods, and `notice`, an `info` line that
 * the default console logger prints too (the one line that says the inbox is ready, so that a
 * working start and a broken one do not look the same). `logger: false` silences it too.
 */
export interface InboxLogger extends Logger {
  notice(obj: object, msg?: string): void;
}

/** What a method the given logger lacks (or every method, with `logger: false`) becomes. */
export const silent = (): void => {};

/**
 * The logger without a `logger` option: warnings, errors and the inbox's `notice` (ready) to stderr,
 * one line each, so that a first deploy sees a failing handler, a wrong secret or an unreachable
 * database; `debug` and `info` stay quiet.
 */
export function consoleLogger(
  write: (line: string) => void = (line) => process.stderr.write(line),
): InboxLogger {
  const line = (level: string) => (obj: object, msg?: string) => write(formatLine(level, obj, msg));
  return { debug: silent, info: silent, notice: line('INFO'), warn: line('WARN'), error: line('ERROR') };
}

/** `2026-11-28T09:30:00.000Z WARN webhook-inbox: handler failed id=evt_1 key=acct-1 err="Error: boom"`. */
export function formatLine(level: string, obj: object, msg = ''): string {
  const fields: string[] = [];
  for (const [name, value] of Object.entries(obj)) {
    if (value === undefined) continue;
    fields.push(`${name}=${fieldText(value)}`);
  }
  const text = [new Date().toISOString(), level, msg, ...fields].filter((part) => part !== '').join(' ');
  return `${text.replace(/[\r\n]+/g, ' ')}\n`;
}

function fieldText(value: unknown): string {
  if (value instanceof Error) return JSON.stringify(`${value.name}: ${value.message}`.slice(0, 500));
  if (typeof value === 'string') return /^[\w.:/@-]+$/.test(value) ? value : JSON.stringify(value);
  if (typeof value === 'object' && value !== null) {
    try {
      return JSON.stringify(value).slice(0, 500);
    } catch {
      return '[object]';
    }
  }
  return String(value);
}

/** Trouble of a kind is said at warn or error once per logger, then at debug until `recovered`. */
const said = new WeakMap<Logger, Set<string>>();

export function firstTime(logger: Logger, kind: string): boolean {
  let kinds = said.get(logger);
  if (!kinds) {
    kinds = new Set();
    said.set(logger, kinds);
  }
  if (kinds.has(kind)) return false;
  kinds.add(kind);
  return true;
}

export function recovered(logger: Logger, kind: string): void {
  said.get(logger)?.delete(kind);
}
