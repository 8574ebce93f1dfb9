import { advanceFunction, previousAdvanceFunction } from './advance.js';
import { claimFunction, previousClaimFunction } from './claim.js';
import { claimLatestFunction } from './claim-latest.js';
import { claimManyFunction } from './claim-many.js';
import { failFunction } from './fail.js';
import { latestCheckFunction } from './latest-check.js';
import { previousSweepFunction, sweepFunction } from './sweep.js';
import type { Tables } from './tables.js';
import { previousTakeNextFunction, takeNextFunction } from './take-next.js';
import { previousTakePendingFunction, takePendingFunction } from './take-pending.js';
import { previousTakeTurnFunction, takeTurnFunction } from './take-turn.js';

/**
 * Today's definition of every PL/pgSQL function the inbox ships, each kept beside its typed
 * caller. The migrations are history: a change to one of these needs a new migration that
 * creates it again, and test/sql-functions-match-migrations.test.ts fails until it exists.
 */
export const functionDefinitions: ReadonlyArray<readonly [name: string, definition: (t: Tables) => string]> =
  [
    ['claim', claimFunction],
    // The 13-parameter overload earlier versions call (a rolling deploy): see claim.ts.
    ['claim', previousClaimFunction],
    ['claim_many', claimManyFunction],
    ['claim_latest', claimLatestFunction],
    ['latest_check', latestCheckFunction],
    ['take_next', takeNextFunction],
    // The takes' earlier signatures, which still mark the event in the take (a rolling deploy:
    // earlier versions send no mark before COMMIT); each after the function it calls.
    ['take_next', previousTakeNextFunction],
    ['take_pending', takePendingFunction],
    ['take_pending', previousTakePendingFunction],
    ['take_turn', takeTurnFunction],
    ['take_turn', previousTakeTurnFunction],
    ['advance', advanceFunction],
    // The 3-parameter overload earlier versions call (a rolling deploy): no gap settled.
    ['advance', previousAdvanceFunction],
    ['fail', failFunction],
    ['sweep', sweepFunction],
    // The 4-parameter overload earlier versions call (a rolling deploy): see sweep.ts.
    ['sweep', previousSweepFunction],
  ];
