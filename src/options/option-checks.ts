import { HEADER_NAME } from '../delivery/field-source.js';
import { formatDuration, parseDuration } from '../duration.js';
import { InboxOptionsError } from '../errors.js';

export { HEADER_NAME };

/** Option checks, for the inbox's and the sender's: a bad value throws InboxOptionsError naming it. */
/** Schema and table prefix: spliced into SQL as identifiers, so plain lower-case ones only. */
export const IDENTIFIER = /^[a-z_][a-z0-9_]{0,39}$/;

/** A value as an error message shows it: short, and never a whole object. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value);
  if (typeof value === 'function') return 'a function';
  if (value === null) return 'null';
  if (typeof value === 'object') return Array.isArray(value) ? 'an array' : 'an object';
  return String(value);
}

export function integer(
  options: Record<string, unknown>,
  name: string,
  fallback: number,
  min: number,
  max: number,
  label = name,
): number {
  const value = options[name];
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InboxOptionsError(label, `must be an integer from ${min} to ${max}; got ${describe(value)}`);
  }
  return value;
}

export function oneOf<T extends string | number>(
  options: Record<string, unknown>,
  name: string,
  allowed: readonly T[],
): T {
  const value = options[name];
  if (value === undefined) return allowed[0];
  if (!allowed.includes(value as T)) {
    throw new InboxOptionsError(
      name,
      `must be one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}; got ${describe(value)}`,
    );
  }
  return value as T;
}

export function bool(options: Record<string, unknown>, name: string, fallback: boolean): boolean {
  const value = options[name];
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean')
    throw new InboxOptionsError(name, `must be a boolean; got ${describe(value)}`);
  return value;
}

/** An optional function; `shape` follows "must be a function" in the error. */
export function optionalFunction<T>(
  options: Record<string, unknown>,
  name: string,
  shape: string,
): T | undefined {
  const value = options[name];
  if (value !== undefined && typeof value !== 'function')
    throw new InboxOptionsError(name, `must be a function${shape}; got ${describe(value)}`);
  return value as T | undefined;
}

/** An HTTP header name, lower-cased. */
export function headerName(value: unknown, name: string, fallback: string): string {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !HEADER_NAME.test(value.toLowerCase())) {
    throw new InboxOptionsError(name, `must be an HTTP header name; got ${describe(value)}`);
  }
  return value.toLowerCase();
}

/** A list of HTTP header names, lower-cased (`secretHeaders`). */
export function headerNames(value: unknown, name: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) {
    throw new InboxOptionsError(name, `must be an array of HTTP header names; got ${describe(value)}`);
  }
  return value.map((v, i) => headerName(v ?? null, `${name}[${i}]`, ''));
}

/** A time option: milliseconds, or a duration string (`'30s'`, `'1h'`, `'500ms'`). */
export function duration(
  options: Record<string, unknown>,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const value = options[name];
  if (value === undefined) return fallback;
  const ms = parseDuration(value);
  if (ms === undefined || ms < min || ms > max) {
    throw new InboxOptionsError(
      name,
      `must be milliseconds or a duration such as '30s' or '1h', from ${formatDuration(min)} to ${formatDuration(max)}; got ${describe(value)}`,
    );
  }
  return ms;
}
