import type { CompiledQuery } from 'kysely';
import type { StatementEntry, StatementNames } from './common.js';
import { inline, literalsOf } from './literals.js';
import { sqlState } from './postgres-error.js';
import type { Session } from './session.js';

/**
 * Which folding statements are PREPAREd on a session (`Session.prepared`, src/db/drivers/session.ts),
 * or 'inline' when folds on it carry the statement's text.
 *
 * Folded as text, a statement travels on the simple protocol, where Postgres parses, analyses
 * and plans its text every time; `execute <prepared>(literals)` skips all of that
 * (bench/postgres-cost.ts measures the difference; on PGlite, where the parse runs in
 * WebAssembly, it is larger). The
 * statements are prepared in one round trip before the session's first fold: once per
 * connection, never per delivery. A session whose PREPARE failed, or whose statements were
 * deallocated behind our back (DISCARD ALL; a pooler that swaps backends), folds text from then
 * on: slower, never wrong. A pool that hands out a new client object for the same connection
 * costs one failed PREPARE per object.
 */
export const DUPLICATE_PREPARED_STATEMENT = '42P05';
export const UNDEFINED_PREPARED_STATEMENT = '26000';

/**
 * Per pool: set when a PREPARE found its statement already there, i.e. the pool hands out a
 * new client object for a connection it handed out before (a wrapping pool). Such a pool's
 * connections cannot be told apart, so all of them fold text, and none pays a PREPARE again.
 */
export interface FoldState {
  textOnly: boolean;
}

/**
 * A registered statement as folded text: `execute <prepared>(literals)` on a session where it
 * is prepared, else its text with the literals in; undefined when it cannot be folded.
 */
export function foldText(
  session: Session,
  folds: FoldState,
  compiled: CompiledQuery,
  entry: StatementEntry | undefined,
): string | undefined {
  const literals = literalsOf(compiled);
  if (literals === undefined) return undefined;
  const prepared = session.prepared;
  if (entry?.prepared && !folds.textOnly && prepared instanceof Set && prepared.has(entry.prepared)) {
    return literals.length
      ? `execute ${entry.prepared}(${literals.join(', ')})`
      : `execute ${entry.prepared}`;
  }
  return inline(compiled.sql, literals);
}

/**
 * PREPAREs the folding statements this session lacks (one pool may serve inboxes in several
 * schemas): one round trip, once per session and schema, before a fold's BEGIN, so that a
 * failure aborts nothing. A failure (a statement of that name already there: a pool that
 * wraps one connection in several client objects) leaves it folding text.
 */
export async function prepareFolds(
  session: Session,
  names: StatementNames,
  folds: FoldState,
  simple: (text: string) => Promise<unknown>,
): Promise<void> {
  const prepared = session.prepared;
  const have = prepared instanceof Set ? prepared : new Set<string>();
  const missing = [...names.preparable()].filter(([, e]) => !have.has(e.prepared));
  try {
    await simple(missing.map(([text, e]) => `prepare ${e.prepared} as ${text}`).join('; '));
    for (const [, e] of missing) have.add(e.prepared);
    session.prepared = have;
  } catch (err) {
    // Without a SQLSTATE the connection itself failed: nothing to fall back to.
    const code = sqlState(err);
    if (code === undefined) throw err;
    session.prepared = 'inline';
    if (code === DUPLICATE_PREPARED_STATEMENT) folds.textOnly = true;
  }
}
