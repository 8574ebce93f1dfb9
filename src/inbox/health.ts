import { missingTables } from '../db/drivers/postgres-error.js';
import { type Outcome, OutcomeKind } from '../outcome.js';
import type { Runtime } from '../runtime/runtime.js';

/** `inbox.health()`: can this instance take deliveries, and what waits for an operator. */
export interface InboxHealth {
  /** false when Postgres does not answer; a Redis outage alone only degrades (`redis: 'down'`). */
  ok: boolean;
  postgres: 'up' | 'down';
  redis: 'up' | 'down' | 'disabled';
  /** Events held for an earlier seq (null when Postgres is down). */
  held: number | null;
  oldestHeldAgeMs: number | null;
  blockedKeys: number | null;
  deadLetters: number | null;
  /**
   * Why Postgres is down for this instance, when it is: what opening or querying it failed
   * with (a refused connection, a failed migration, missing tables), for the operator who
   * reads `/health` at a first deploy.
   */
  error?: string;
}

/** `health()` answers within about this long, whatever is hanging. */
const HEALTH_TIMEOUT_MS = 2000;

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * One cheap query and one Redis PING, each bounded by a short timeout. `ok` is false only when
 * Postgres does not answer: without Redis, the inbox is slower on duplicates but as correct.
 */
export async function checkHealth(rt: Runtime): Promise<InboxHealth> {
  let error: string | undefined;
  const [stats, redis] = await Promise.all([
    withTimeout(rt.stats(), HEALTH_TIMEOUT_MS).catch((err) => {
      rt.options.logger.warn({ err }, 'webhook-inbox: health check: Postgres does not answer');
      error = missingTables(err)
        ? "the inbox's tables are missing: run `webhook-inbox migrate`"
        : (err instanceof Error ? err.message : String(err)).slice(0, 300);
      return undefined;
    }),
    rt.options.redis === undefined
      ? ('disabled' as const)
      : rt
          .setUpTelemetry()
          .then(() => rt.redis?.ping(HEALTH_TIMEOUT_MS) ?? ('down' as const))
          .catch(() => 'down' as const),
  ]);
  return {
    ok: stats !== undefined,
    postgres: stats ? 'up' : 'down',
    redis,
    held: stats?.held ?? null,
    oldestHeldAgeMs: stats ? stats.oldestHeldAgeMs : null,
    blockedKeys: stats?.blockedKeys ?? null,
    deadLetters: stats?.deadLetters ?? null,
    ...(error === undefined ? {} : { error }),
  };
}

/** Health as an outcome for adapters to write: 200 when ok (even degraded), else 503. */
export function healthOutcome(health: InboxHealth): Outcome {
  return {
    kind: OutcomeKind.health,
    status: health.ok ? 200 : 503,
    headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' },
    body: health as unknown as Record<string, unknown>,
  };
}
