import type { StatementNames } from '../drivers/common.js';
import { createAdvance } from './advance.js';
import { createClaim } from './claim.js';
import { createClaimLatest } from './claim-latest.js';
import { createClaimMany } from './claim-many.js';
import { createCountPending } from './count-pending.js';
import { createFail } from './fail.js';
import { createApplySavepoint, createUndoTake } from './failed-run.js';
import { createFindProcessed } from './find-processed.js';
import { createBusiestGroups, createGroupState } from './group-state.js';
import { createLatestCheck } from './latest-check.js';
import { createMarkApplied } from './mark-applied.js';
import { createNotifyPending } from './notify-pending.js';
import { createRecordApplied } from './record-applied.js';
import { createRecordCause } from './record-cause.js';
import { createSnooze } from './snooze.js';
import { createStats } from './stats.js';
import { createStoreResult } from './store-result.js';
import { createSweep } from './sweep.js';
import type { Tables } from './tables.js';
import { createTakeGrouped } from './take-grouped.js';
import { createTakeNext } from './take-next.js';
import { createTakePending } from './take-pending.js';
import { createTakeTurn } from './take-turn.js';
import { createTryClaim } from './try-claim.js';

/** Every statement the inbox sends on its own behalf, each one round trip, bound to its tables. */
export function createStatements(
  names: StatementNames,
  t: Tables,
  ownDriver: boolean,
  /** The database is one session (PGlite): the try-claim needs no lock there. */
  oneSession: boolean,
) {
  const applySavepoint = createApplySavepoint(names, t);
  return {
    claim: createClaim(names, t),
    /** Unordered inline claims in plain statements; only where the try-lock rides as `first`. */
    tryClaim: ownDriver ? createTryClaim(names, t, oneSession) : undefined,
    claimMany: createClaimMany(names, t),
    claimLatest: createClaimLatest(names, t),
    latestCheck: createLatestCheck(names, t),
    storeResult: createStoreResult(names, t),
    recordApplied: createRecordApplied(names, t),
    markApplied: createMarkApplied(names, t),
    fail: createFail(names, t),
    recordCause: createRecordCause(names, t),
    snooze: createSnooze(names, t),
    undoTake: createUndoTake(names, t),
    applySavepoint,
    /** The take's savepoint, for a user's Kysely instance (our drivers send it with the take). */
    takeSavepoint: ownDriver ? undefined : applySavepoint,
    findProcessed: createFindProcessed(names, t),
    takeNext: createTakeNext(names, t),
    takePending: createTakePending(names, t),
    takeGrouped: createTakeGrouped(names, t),
    ...createGroupState(names, t),
    busiestGroups: createBusiestGroups(names, t),
    takeTurn: createTakeTurn(names, t),
    advance: createAdvance(names, t),
    sweep: createSweep(names, t),
    stats: createStats(names, t),
    countPending: createCountPending(names, t),
    notifyPending: createNotifyPending(names, t),
  };
}

export type Statements = ReturnType<typeof createStatements>;
