import { parseDuration } from '../duration.js';
import { DEAD_REASONS } from '../operations/dead-letters.js';
import { type DeadLetterFilter, parseInstant } from '../operations/index.js';
import { FormError } from './form-error.js';

const FIELDS = [
  'reason',
  'cause',
  'source',
  'key',
  'type',
  'since',
  'until',
  'olderThan',
  'newerThan',
] as const;

export type DeadLetterQuery = { [name in (typeof FIELDS)[number]]?: string };

export interface DeadLetterFilterInput {
  /** What the operator typed, to show in the form again. */
  readonly query: DeadLetterQuery;
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
  const query: DeadLetterQuery = Object.fromEntries(FIELDS.map((name) => [name, get(name)]));
  if (query.reason !== undefined && !(DEAD_REASONS as readonly string[]).includes(query.reason)) {
    throw new FormError(`\`reason\` must be one of ${DEAD_REASONS.join(', ')}`);
  }
  for (const name of ['olderThan', 'newerThan'] as const) {
    if (query[name] !== undefined && parseDuration(query[name]) === undefined) {
      throw new FormError(`\`${name}\` must be a duration like 30m, 12h, 7d`);
    }
  }
  if (query.cause !== undefined && !/^[0-9a-f]{12}$/.test(query.cause)) {
    throw new FormError('`cause` must be a cause as the overview lists it (12 hex characters)');
  }
  // Pinned once: the confirmation page carries the absolute times, so what is confirmed is replayed.
  const now = new Date();
  const times: { since?: Date; until?: Date } = {};
  for (const name of ['since', 'until'] as const) {
    if (query[name] === undefined) continue;
    const at = parseInstant(query[name], now);
    if (!at) {
      throw new FormError(
        `\`${name}\` must be an ISO 8601 time (2026-11-28T10:00:00Z), a time of today in UTC (10:00) or a duration ago (2h)`,
      );
    }
    times[name] = at;
  }
  if (times.since && times.until && times.since >= times.until) {
    throw new FormError('`since` must be before `until`');
  }
  return {
    query: { ...query, since: times.since?.toISOString(), until: times.until?.toISOString() },
    filter: { ...query, since: times.since, until: times.until },
  };
}
