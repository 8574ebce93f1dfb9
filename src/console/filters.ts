/** The dead-letter list's filters, from a query string or a form, checked field by field. */
import { parseDuration } from '../duration.js';
import { DEAD_REASONS } from '../operations/dead-letters.js';
import type { DeadLetterFilter } from '../operations/index.js';
import { FormError } from './form-error.js';
import type { DeadLetterQuery } from './pages.js';

export interface DeadLetterFilterInput {
  /** What the operator typed, to show in the form again. */
  readonly query: DeadLetterQuery;
  /** What `deadLetters()` is given. */
  readonly filter: DeadLetterFilter;
}

const MAX_FIELD = 500;

export function parseDeadLetterFilter(params: URLSearchParams): DeadLetterFilterInput {
  const get = (name: keyof DeadLetterQuery) => {
    const value = params.get(name)?.trim();
    if (value && value.length > MAX_FIELD)
      throw new FormError(`\`${name}\` is longer than ${MAX_FIELD} characters`);
    return value ? value : undefined;
  };
  const query: DeadLetterQuery = {
    reason: get('reason'),
    source: get('source'),
    key: get('key'),
    olderThan: get('olderThan'),
    newerThan: get('newerThan'),
  };
  if (query.reason !== undefined && !(DEAD_REASONS as readonly string[]).includes(query.reason)) {
    throw new FormError(`\`reason\` must be one of ${DEAD_REASONS.join(', ')}`);
  }
  for (const name of ['olderThan', 'newerThan'] as const) {
    if (query[name] !== undefined && parseDuration(query[name]) === undefined) {
      throw new FormError(`\`${name}\` must be a duration like 30m, 12h, 7d`);
    }
  }
  return {
    query,
    filter: {
      reason: query.reason,
      source: query.source,
      key: query.key,
      olderThan: query.olderThan,
      newerThan: query.newerThan,
    },
  };
}
