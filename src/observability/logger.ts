/** A pino-shaped logger. Every method is optional to call; the inbox is silent without one. */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** `notice`: an `info` line the default logger prints too (the inbox is ready: a broken start looks different). */
export interface InboxLogger extends Logger {
  notice(obj: object, msg?: string): void;
}

export const silent = (): void => {};

/** Without a `logger` option: warnings, errors and `notice` to stderr, so a first deploy sees what fails. */
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
