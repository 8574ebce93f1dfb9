import { advanceFunction } from './advance.js';
import { claimFunction } from './claim.js';
import { claimLatestFunction } from './claim-latest.js';
import { claimManyFunction } from './claim-many.js';
import { failFunction } from './fail.js';
import { latestCheckFunction } from './latest-check.js';
import { sweepFunction } from './sweep.js';
import type { Tables } from './tables.js';
import { takeGroupedFunction } from './take-grouped.js';
import { takeNextFunction } from './take-next.js';
import { takePendingFunction } from './take-pending.js';
import { takeTurnFunction } from './take-turn.js';

/** Every PL/pgSQL function the inbox ships, by name, from its one definition; the migrations create them. */
export const functionDefinitions = {
  claim: claimFunction,
  claim_many: claimManyFunction,
  claim_latest: claimLatestFunction,
  latest_check: latestCheckFunction,
  take_next: takeNextFunction,
  take_pending: takePendingFunction,
  take_grouped: takeGroupedFunction,
  take_turn: takeTurnFunction,
  advance: advanceFunction,
  fail: failFunction,
  sweep: sweepFunction,
} as const satisfies Record<string, (t: Tables) => string>;

export type FunctionName = keyof typeof functionDefinitions;
