/** Values as SQL literals (fold.ts), strings by pg's `escapeLiteral`; undefined: the statement goes bound. */
import type { CompiledQuery } from 'kysely';
import pg from 'pg';

const { escapeLiteral } = pg;
const NEEDS_ESCAPING = /['\\]/;

export function quote(identifier: string): string {
  return `"${identifier.replace(/"/g, '""')}"`;
}

/** One value as a SQL literal, or undefined when it cannot be written as one. */
export function literal(value: unknown): string | undefined {
  if (value === null || value === undefined) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      return Number.isFinite(value) ? String(value) : undefined;
    case 'bigint':
      return value.toString();
    case 'string':
      // What escapeLiteral returns for such text, without its character-by-character loop.
      return NEEDS_ESCAPING.test(value) ? escapeLiteral(value) : `'${value}'`;
  }
  // E'': its backslash means the same whatever standard_conforming_strings says.
  if (value instanceof Uint8Array) return `E'\\\\x${Buffer.from(value).toString('hex')}'::bytea`;
  if (value instanceof Date)
    return Number.isNaN(value.getTime()) ? undefined : `'${value.toISOString()}'::timestamptz`;
  if (Array.isArray(value)) {
    // Untyped: the statement gives it its type ($n::text[]).
    const elements: string[] = [];
    for (const element of value) {
      const text = arrayElement(element);
      if (text === undefined) return undefined;
      elements.push(text);
    }
    return escapeLiteral(`{${elements.join(',')}}`);
  }
  return undefined;
}

/** One element of an array literal: NULL, or quoted with its quotes and backslashes escaped. */
function arrayElement(value: unknown): string | undefined {
  if (value === null || value === undefined) return 'NULL';
  let text: string;
  if (typeof value === 'string') text = value;
  else if (typeof value === 'number') {
    if (!Number.isFinite(value)) return undefined;
    text = String(value);
  } else if (typeof value === 'boolean') text = value ? 't' : 'f';
  else if (value instanceof Uint8Array) text = `\\x${Buffer.from(value).toString('hex')}`;
  else return undefined;
  return `"${text.replace(/[\\"]/g, '\\$&')}"`;
}

export function literalsOf(compiled: CompiledQuery): string[] | undefined {
  const literals: string[] = [];
  for (const value of compiled.parameters) {
    const text = literal(value);
    if (text === undefined) return undefined;
    literals.push(text);
  }
  return literals;
}

/** A registered statement's text (no `$` but its placeholders) with the literals in. */
export function inline(sql: string, literals: string[]): string {
  const parts = placeholderSplit(sql);
  let text = parts[0] as string;
  for (let i = 1; i < parts.length; i += 2) text += literals[(parts[i] as number) - 1] + parts[i + 1];
  return text;
}

/** A statement's text split around its placeholders (text, n, text, …), once per text. */
const splits = new Map<string, Array<string | number>>();
function placeholderSplit(sql: string): Array<string | number> {
  let parts = splits.get(sql);
  if (!parts) {
    parts = sql.split(/\$(\d+)/).map((part, i) => (i % 2 === 1 ? Number(part) : part));
    // Registered statements only (a handful per schema); a bound keeps a misuse from growing it.
    if (splits.size < 1000) splits.set(sql, parts);
  }
  return parts;
}
