/** A pino-shaped logger. Every method is optional to call; the inbox is silent without one. */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** What a method the given logger lacks (or every method, without a logger) becomes. */
export const silent = (): void => {};
