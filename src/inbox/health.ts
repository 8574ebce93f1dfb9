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
  /** What opening or querying Postgres failed with, when it is down (for a first deploy's `/health`). */
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

/** Without Redis the inbox is slower on duplicates, as correct: its outage only degrades. */
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

export function healthOutcome(health: InboxHealth): Outcome {
  return {
    kind: OutcomeKind.health,
    status: health.ok ? 200 : 503,
    headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' },
    body: health as unknown as Record<string, unknown>,
  };
}
