import type { CompiledQuery } from 'kysely';
import type { StatementEntry, StatementNames } from './common.js';
import { inline, literalsOf } from './literals.js';
import { sqlState } from './postgres-error.js';
import type { Session } from './session.js';

/**
 * Folding statements are PREPAREd once per session; a pool whose sessions lose them (a transaction-mode
 * pooler, DISCARD ALL) says so by 26000 or 42P05, and from then on folds literal text.
 */
export const DUPLICATE_PREPARED_STATEMENT = '42P05';
export const UNDEFINED_PREPARED_STATEMENT = '26000';

/** Per pool: whether its sessions were found not to keep our statements. */
export interface PoolFolds {
  literals: boolean;
}

/** Whether `err` says the pool's sessions do not keep our statements; if so, the pool stops naming any. */
export function lostStatements(folds: PoolFolds, err: unknown): boolean {
  const code = sqlState(err);
  if (code !== UNDEFINED_PREPARED_STATEMENT && code !== DUPLICATE_PREPARED_STATEMENT) return false;
  folds.literals = true;
  return true;
}

/** `execute "<name>"(literals)` where prepared, else the text with literals; undefined if a value cannot. */
export function foldText(
  session: Session,
  folds: PoolFolds,
  compiled: CompiledQuery,
  entry: StatementEntry | undefined,
): string | undefined {
  const literals = literalsOf(compiled);
  if (literals === undefined) return undefined;
  if (entry?.prepared && !folds.literals && session.prepared?.has(entry.name)) {
    const name = quoted(entry.name);
    return literals.length ? `execute ${name}(${literals.join(', ')})` : `execute ${name}`;
  }
  return literals.length ? inline(compiled.sql, literals) : compiled.sql;
}

/** PREPAREs what this session lacks in one round trip before a fold's BEGIN, so a failure aborts nothing. */
export async function prepareFolds(
  session: Session,
  names: StatementNames,
  folds: PoolFolds,
  simple: (text: string) => Promise<unknown>,
): Promise<void> {
  const have = session.prepared ?? new Set<string>();
  const missing = [...names.preparable()].filter(([, e]) => !have.has(e.name));
  try {
    await simple(missing.map(([text, e]) => `prepare ${quoted(e.name)} as ${text}`).join('; '));
  } catch (err) {
    if (!lostStatements(folds, err)) throw err;
    return;
  }
  for (const [, e] of missing) have.add(e.name);
  session.prepared = have;
}

function quoted(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}
