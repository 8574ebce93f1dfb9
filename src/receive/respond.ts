/** Every HTTP outcome of a delivery. Nothing internal is ever put in a response; the logger gets it. */
import { missingTables, sqlState } from '../db/drivers/postgres-error.js';
import type { ClaimRow } from '../db/sql/claim.js';
import { CONTENDED } from '../db/sql/sql-state.js';
import type { ParsedDelivery } from '../delivery/delivery.js';
import {
  type InvalidDeliveryError,
  PoolWaitTimeoutError,
  RawBodyUnavailableError,
  UnauthorizedDeliveryError,
} from '../errors.js';
import { firstTime, recovered } from '../observability/logger.js';
import { type Outcome, OutcomeKind, ok, problem } from '../outcome.js';
import type { ResolvedOptions } from '../runtime/resolved-options.js';
import type { Runtime } from '../runtime/runtime.js';

export function processed(id: string, result: unknown): Outcome {
  return ok(OutcomeKind.processed, 200, { status: 'processed', id, result: result ?? null });
}

export function duplicate(id: string, result: unknown): Outcome {
  return ok(OutcomeKind.duplicate, 200, { status: 'duplicate', id, result }, true);
}

/** No handler takes its type: recorded `ignored`. 200, so the provider stops sending it. */
export function ignored(id: string, type: string | null, replayed = false): Outcome {
  return ok(OutcomeKind.ignored, 200, { status: 'ignored', id, type }, replayed);
}

export function superseded(id: string, key: string, version: number, latest: number | null): Outcome {
  return ok(OutcomeKind.superseded, 200, { status: 'superseded', id, key, version, latest });
}

/** RetryLater: stored `pending` until `retryAt`; 202, so that the sender does not deliver it meanwhile. */
export function snoozed(id: string, retryAt: Date): Outcome {
  return ok(OutcomeKind.pending, 202, { status: 'pending', id, retryAt: retryAt.toISOString() });
}

export function deadLettered(id: string, reason: string | null): Outcome {
  return ok(OutcomeKind.deadLettered, 200, { status: 'dead-lettered', id, reason });
}

export function invalid(err: InvalidDeliveryError): Outcome {
  const outcome = problem(OutcomeKind.invalid, err.status, err.message, { field: err.field });
  if (!err.draining) return outcome;
  // The rest of the body is being drained: the connection stays (outcome.ts closes it otherwise).
  const { connection: _closed, ...headers } = outcome.headers;
  return { ...outcome, headers };
}

/** 503 with Retry-After, nothing stored: the sender keeps the event and delivers it again later. */
export function shed(reason: 'in-flight' | 'pool' | 'pending' | 'closing'): Outcome {
  const detail =
    reason === 'pending'
      ? 'Too many events are waiting to be applied; deliver the event again later'
      : reason === 'closing'
        ? 'This instance is shutting down; deliver the event again'
        : 'Too many deliveries are in flight; deliver the event again later';
  return problem(OutcomeKind.shed, 503, detail, { reason, retryAfterSeconds: reason === 'pending' ? 5 : 1 });
}

/** Inline mode: this delivery's group has `groups.inFlight` deliveries in flight here; nothing stored. */
export function groupBusy(cap: number): Outcome {
  return problem(
    OutcomeKind.shed,
    429,
    `This event's group has ${cap} deliveries in flight; deliver the event again later`,
    { reason: 'group', retryAfterSeconds: 1 },
  );
}

export function unavailable(): Outcome {
  return problem(
    OutcomeKind.unavailable,
    503,
    'The inbox cannot reach its database; deliver the event again later',
    { retryAfterSeconds: 1 },
  );
}

/** The handler threw and the attempt was counted (not yet poison): the sender should retry. */
export function handlerFailed(id: string): Outcome {
  return problem(
    OutcomeKind.failed,
    500,
    'The handler failed; nothing was applied. Deliver the event again.',
    { id },
  );
}

/** RejectEvent: dead-lettered; a 4xx with the preset's do-not-retry headers, so that senders stop. */
export function rejected(o: ResolvedOptions, id: string): Outcome {
  const outcome = problem(
    OutcomeKind.rejected,
    422,
    'The handler rejected the event; it is dead-lettered and will not be applied. Do not deliver it again.',
    { id },
  );
  const extra = o.provider?.rejectHeaders;
  return extra && Object.keys(extra).length > 0
    ? { ...outcome, headers: { ...outcome.headers, ...extra } }
    : outcome;
}

export function decided(o: ResolvedOptions, d: ParsedDelivery, c: Omit<ClaimRow, 'rowAtCommit'>): Outcome {
  const h = { id: o.fields.id.label, key: o.fields.key.label, seq: o.fields.seq.label };
  switch (c.decision) {
    case 'duplicate':
      return c.reason === 'ignored' ? ignored(d.id, d.type, true) : duplicate(d.id, c.result);
    case 'held':
      return ok(OutcomeKind.held, 202, {
        status: 'held',
        id: d.id,
        key: d.key,
        seq: d.seq,
        expected: c.expected,
      });
    case 'pending':
      return ok(OutcomeKind.pending, 202, { status: 'pending', id: d.id });
    case 'dead':
      return c.reason === 'rejected' ? rejected(o, d.id) : deadLettered(d.id, c.reason);
    case 'mismatch': {
      if (c.reason === 'seq-applied') {
        return problem(
          OutcomeKind.mismatch,
          422,
          `${h.seq} ${d.seq} of this ${h.key} was already applied for another ${h.id}`,
          { field: h.seq },
        );
      }
      if (c.reason === 'seq-taken') {
        return problem(
          OutcomeKind.mismatch,
          422,
          `${h.seq} ${d.seq} of this ${h.key} is already held for another ${h.id}`,
          { field: h.seq },
        );
      }
      const field = c.reason === 'key' ? h.key : c.reason === 'seq' ? h.seq : 'body';
      return problem(
        OutcomeKind.mismatch,
        422,
        `${h.id} ${JSON.stringify(d.id)} was first used with a different ${c.reason === 'body' ? 'body' : field}`,
        { field },
      );
    }
    case 'buffer-full':
      return problem(
        OutcomeKind.bufferFull,
        429,
        c.reason === 'seq-ahead'
          ? `${h.seq} ${d.seq} is more than ${o.maxSeqAhead} past the next expected seq ${c.expected}`
          : `key already holds ${o.maxHeldPerKey} events waiting for seq ${c.expected}`,
        {
          field: c.reason === 'seq-ahead' ? h.seq : h.key,
          expected: c.expected,
          retryAfterSeconds: Math.max(1, Math.ceil(o.gapTimeoutMs / 1000)),
        },
      );
    default:
      throw new Error(`webhook-inbox: unexpected claim decision ${c.decision}`);
  }
}

/** Signature verification refused the delivery (401), or could not run (503: not the sender's fault). */
export function unverified(o: ResolvedOptions, err: unknown): Outcome {
  if (err instanceof UnauthorizedDeliveryError) {
    // The hint stays in the log, never in the answer (it would help whoever forges signatures).
    if (firstTime(o.logger, 'unverified')) {
      o.logger.warn(
        { field: err.field, reason: err.message, source: o.source },
        `webhook-inbox: a signature did not verify (401); later ones are logged at info. ${secretHint(o)}`,
      );
    } else o.logger.info({ field: err.field, reason: err.message }, 'webhook-inbox: unverified delivery');
    return problem(OutcomeKind.unauthorized, 401, err.message, { field: err.field });
  }
  // The verifier itself failed: a retry, not a 401 that could get the endpoint disabled.
  o.logger.error({ err }, 'webhook-inbox: signature verification failed to run');
  const detail = 'The delivery could not be verified; deliver it again later';
  return problem(OutcomeKind.unavailable, 503, detail, { retryAfterSeconds: 1 });
}

/** Where a wrong secret usually comes from (`stripe listen` signs with its own whsec_ secret). */
function secretHint(o: ResolvedOptions): string {
  if (o.provider?.name === 'stripe') {
    return "Check the signing secret: `stripe listen` signs with its own whsec_ secret (printed when it starts), which differs from the dashboard endpoint's; a body changed before the inbox read it (a JSON parser, a proxy) fails too.";
  }
  return "Check the signing secret (each endpoint has its own; a provider's CLI signs with one of its own), and that nothing changes the body before the inbox reads it.";
}

/** Said at error once, then at debug until a delivery reaches the database again (`databaseAnswered`). */
export function databaseFailed(o: ResolvedOptions, err: unknown): void {
  const hint = missingTables(err)
    ? "; the inbox's tables are missing: run `webhook-inbox migrate` (or leave `migrate` on)"
    : '';
  if (firstTime(o.logger, 'database')) {
    o.logger.error(
      { err, source: o.source },
      `webhook-inbox: the database failed under a delivery (503)${hint}`,
    );
  } else o.logger.debug({ err }, 'webhook-inbox: delivery failed in the inbox');
}

export function databaseAnswered(o: ResolvedOptions): void {
  recovered(o.logger, 'database');
}

/** Contention is 409 (retry soon), the rest 503. */
export function infrastructureFailure(o: ResolvedOptions, err: unknown): Outcome {
  if (err instanceof PoolWaitTimeoutError) return shed('pool');
  if (CONTENDED.has(sqlState(err) ?? '')) {
    return problem(
      OutcomeKind.inFlight,
      409,
      'Another delivery of this event (or of its key) is being processed',
      { retryAfterSeconds: 1 },
    );
  }
  databaseFailed(o, err);
  return unavailable();
}

/** An error an adapter caught: 500; a misconfiguration also goes to a process warning, once. */
export function outcomeForError(rt: Runtime, err: unknown): Outcome {
  const o = rt.options;
  if (err instanceof RawBodyUnavailableError) {
    if (!rt.warnedRawBody) {
      rt.warnedRawBody = true;
      process.emitWarning(err.message, 'WebhookInboxWarning');
    }
    o.logger.error({ err }, err.message);
    return problem(
      OutcomeKind.misconfigured,
      500,
      'The inbox is misconfigured: the request body was consumed before it',
      {},
    );
  }
  o.logger.error({ err }, 'webhook-inbox: unexpected error');
  return problem(OutcomeKind.failed, 500, 'The delivery could not be processed; deliver it again later', {});
}
