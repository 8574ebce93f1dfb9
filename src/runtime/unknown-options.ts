/** A misspelt option (`maxAtempts`) must not silently do nothing: it is refused, with the nearest name. */
import { InboxOptionsError } from '../errors.js';
import type { InboxOptions } from '../options/options.js';
import { docsUrl } from '../outcome.js';

const OPTION_NAMES = [
  'handle',
  'handlers',
  'db',
  'dataDir',
  'poolSize',
  'ackPoolSize',
  'source',
  'schema',
  'tablePrefix',
  'migrate',
  'citus',
  'headers',
  'fields',
  'idFromBody',
  'maxBodyBytes',
  'bodyTimeoutMs',
  'parse',
  'bodySchema',
  'respond',
  'lockTimeoutMs',
  'onInFlight',
  'keepPayload',
  'firstSeq',
  'maxHeldPerKey',
  'maxSeqAhead',
  'gapTimeoutMs',
  'onGapTimeout',
  'sweepIntervalMs',
  'retryFor',
  'maxAttempts',
  'onPoison',
  'retryBaseMs',
  'retryCapMs',
  'duplicateCacheSize',
  'retention',
  'deadRetention',
  'onDeadLetter',
  'logger',
  'redis',
  'redisPrefix',
  'redisTimeoutMs',
  'metrics',
  'tracerProvider',
  'verify',
  'provider',
  'secretHeaders',
  'order',
  'mode',
  'workers',
  'groups',
  'workerBatchSize',
  'pollIntervalMs',
  'maxInFlight',
  'poolWaitTimeoutMs',
  'handlerTimeoutMs',
  'maxPending',
] as const satisfies readonly (keyof InboxOptions)[];
// Every option of InboxOptions is in the list (a new option without its name fails to compile).
const everyOptionListed: Exclude<keyof InboxOptions, (typeof OPTION_NAMES)[number]> extends never
  ? true
  : never = true;
void everyOptionListed;
const KNOWN_OPTIONS: ReadonlySet<string> = new Set(OPTION_NAMES);

export function rejectUnknownOptions(o: Record<string, unknown>): void {
  for (const name of Object.keys(o)) {
    if (KNOWN_OPTIONS.has(name)) continue;
    const near = closest(name, OPTION_NAMES);
    throw new InboxOptionsError(
      name,
      `is not an inbox option${near ? `; did you mean \`${near}\`?` : ''} (${docsUrl('configuration.md')} lists them)`,
    );
  }
}

/** The known name one edit (in three letters; a swap counts one) from `name`, case ignored. */
export function closest(name: string, names: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of names) {
    const d = editDistance(name.toLowerCase(), candidate.toLowerCase());
    if (d <= Math.max(1, Math.floor(candidate.length / 3)) && d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/** Edits (insert, delete, replace, swap of neighbours) from `a` to `b`: optimal string alignment. */
function editDistance(a: string, b: string): number {
  let beforePrevious: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(
        previous[j] + 1,
        current[j - 1] + 1,
        previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        current[j] = Math.min(current[j], beforePrevious[j - 2] + 1);
      }
    }
    beforePrevious = previous;
    previous = current;
  }
  return previous[b.length];
}
