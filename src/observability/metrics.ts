/**
 * Prometheus metrics through the application's prom-client `Registry` (imported only when given).
 * Labels stay low-cardinality, never ids, keys or seqs; gauges that need a query are computed at
 * scrape time, never on the delivery path.
 */
import { OutcomeKind } from '../outcome.js';

export interface RegistryLike {
  registerMetric(metric: any): void;
  getSingleMetric(name: string): unknown;
}

export interface MetricsOptions {
  /** The prom-client registry to register the inbox's metrics in (`new Registry()` or `register`). */
  registry: RegistryLike;
}

export interface InboxStats {
  held: number;
  oldestHeldAgeMs: number | null;
  blockedKeys: number;
  deadLetters: number;
  /** Events waiting for a worker or a retry. */
  pending: number;
  /** How long the longest-blocked key has been blocked, in ms; null when none is. */
  oldestBlockedAgeMs: number | null;
  /** Option `groups`: the busiest groups (at most MAX_GROUP_LABELS), what waits and runs of each. */
  groups?: ReadonlyArray<{ readonly group: string; readonly pending: number; readonly running: number }>;
}

export interface InboxMetrics {
  delivery(outcome: OutcomeKind): void;
  duplicate(answeredBy: 'memory' | 'redis' | 'postgres'): void;
  handler(seconds: number, outcome: 'processed' | 'failed'): void;
  claimToCommit(seconds: number): void;
  /** Deferred mode: how many claims one statement and one commit carried. */
  claimBatch(size: number): void;
  /** Deferred mode: from a delivery's claim queued to its batch committed. */
  acknowledgement(seconds: number): void;
  gapTimeout(action: 'skipped' | 'blocked'): void;
  deadLetter(reason: string): void;
  /** A dead letter's cause (src/apply/cause.ts): what "a new cause appeared" alerts on. */
  deadLetterCause(cause: string): void;
  /** A new id at a seq its key already applied (`applied`) or already holds for another id (`waiting`). */
  seqConflict(reason: 'applied' | 'waiting'): void;
  /** An event no handler takes, recorded `ignored`, by its type. */
  ignored(type: string | null): void;
  /** A delivery whose group (option `groups.by`) could not be read: stored without one. */
  groupUnreadable(): void;
  drain(seconds: number): void;
  sweeperRun(): void;
  sweeperError(): void;
  redisFallback(reason: string): void;
  redisWriteError(): void;
  lookFirstError(): void;
}

const noop = () => {};
export const noMetrics: InboxMetrics = {
  delivery: noop,
  duplicate: noop,
  handler: noop,
  claimToCommit: noop,
  claimBatch: noop,
  acknowledgement: noop,
  gapTimeout: noop,
  deadLetter: noop,
  deadLetterCause: noop,
  seqConflict: noop,
  ignored: noop,
  groupUnreadable: noop,
  drain: noop,
  sweeperRun: noop,
  sweeperError: noop,
  redisFallback: noop,
  redisWriteError: noop,
  lookFirstError: noop,
};

/** Every metric name (docs/observability.md's table is checked against it). */
export const METRIC_NAMES = Object.freeze({
  deliveries: 'webhook_inbox_deliveries_total',
  handlerDuration: 'webhook_inbox_handler_duration_seconds',
  claimToCommit: 'webhook_inbox_claim_to_commit_seconds',
  claimBatchSize: 'webhook_inbox_claim_batch_size',
  acknowledgement: 'webhook_inbox_acknowledgement_seconds',
  duplicates: 'webhook_inbox_duplicates_total',
  heldEvents: 'webhook_inbox_held_events',
  oldestHeldAge: 'webhook_inbox_oldest_held_age_seconds',
  blockedKeys: 'webhook_inbox_blocked_keys',
  deadLetterEvents: 'webhook_inbox_dead_letter_events',
  gapTimeouts: 'webhook_inbox_gap_timeouts_total',
  deadLetters: 'webhook_inbox_dead_letters_total',
  deadLetterCauses: 'webhook_inbox_dead_letter_causes_total',
  seqConflicts: 'webhook_inbox_seq_conflicts_total',
  ignored: 'webhook_inbox_ignored_total',
  groupUnreadable: 'webhook_inbox_group_unreadable_total',
  groupPending: 'webhook_inbox_group_pending_events',
  groupRunning: 'webhook_inbox_group_running',
  drainLatency: 'webhook_inbox_drain_latency_seconds',
  sweeperRuns: 'webhook_inbox_sweeper_runs_total',
  sweeperErrors: 'webhook_inbox_sweeper_errors_total',
  redisFallbacks: 'webhook_inbox_redis_fallbacks_total',
  redisWriteErrors: 'webhook_inbox_redis_write_errors_total',
  lookFirstErrors: 'webhook_inbox_look_first_errors_total',
  pendingEvents: 'webhook_inbox_pending_events',
  oldestBlockedKeyAge: 'webhook_inbox_oldest_blocked_key_age_seconds',
  databaseUp: 'webhook_inbox_database_up',
} as const);

type StatsSource = { source: string; stats: () => Promise<InboxStats> };

interface Shared {
  m: Record<keyof typeof METRIC_NAMES, any>;
  sources: Set<StatsSource>;
}
const shared = new WeakMap<RegistryLike, Shared>();

/** Distinct `type` (and `cause`) labels per inbox, then `other`: the type is the sender's text. */
export const MAX_TYPE_LABELS = 100;
/** Groups with a series of their own: the busiest, read again at each scrape. */
export const MAX_GROUP_LABELS = 20;

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];
const DRAIN_BUCKETS = [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300];

async function loadPromClient(): Promise<any> {
  try {
    const mod: any = await import('prom-client');
    return mod.Counter ? mod : mod.default;
  } catch (err) {
    throw new Error('webhook-inbox: option `metrics` needs the `prom-client` package installed', {
      cause: err,
    });
  }
}

function define(client: any, registry: RegistryLike): Shared {
  const sources = new Set<StatsSource>();
  // The gauges of one scrape share one query per inbox; the next scrape queries again.
  let inFlight: Promise<Map<string, InboxStats>> | undefined;
  const answered = new Map<string, boolean>();
  const read = (): Promise<Map<string, InboxStats>> => {
    if (inFlight) return inFlight;
    const values = Promise.all(
      [...sources].map(async (s) => [s.source, await s.stats().catch(() => undefined)] as const),
    ).then((rows) => {
      const bySource = new Map<string, InboxStats>();
      answered.clear();
      for (const [source, stats] of rows) answered.set(source, (answered.get(source) ?? true) && !!stats);
      for (const [source, stats] of rows) {
        // A failed query leaves the source out: a scrape must not fail because the database is down.
        if (!stats) continue;
        const seen = bySource.get(source);
        bySource.set(
          source,
          seen
            ? {
                held: seen.held + stats.held,
                oldestHeldAgeMs: Math.max(seen.oldestHeldAgeMs ?? 0, stats.oldestHeldAgeMs ?? 0) || null,
                blockedKeys: seen.blockedKeys + stats.blockedKeys,
                deadLetters: seen.deadLetters + stats.deadLetters,
                pending: seen.pending + stats.pending,
                oldestBlockedAgeMs:
                  Math.max(seen.oldestBlockedAgeMs ?? 0, stats.oldestBlockedAgeMs ?? 0) || null,
                groups: seen.groups ?? stats.groups,
              }
            : stats,
        );
      }
      return bySource;
    });
    inFlight = values;
    values.finally(() => {
      inFlight = undefined;
    });
    return values;
  };
  const gauge = (name: string, help: string, value: (s: InboxStats) => number) => {
    const existing = registry.getSingleMetric(name);
    if (existing) return existing;
    return new client.Gauge({
      name,
      help,
      labelNames: ['source'],
      registers: [registry],
      async collect(this: any) {
        for (const [source, stats] of await read()) this.set({ source }, value(stats));
      },
    });
  };
  const groupGauge = (name: string, help: string, value: 'pending' | 'running') =>
    registry.getSingleMetric(name) ??
    new client.Gauge({
      name,
      help,
      labelNames: ['source', 'group'],
      registers: [registry],
      async collect(this: any) {
        const bySource = await read();
        // Only this scrape's busiest: a group that left them leaves no stale series.
        this.reset();
        for (const [source, stats] of bySource)
          for (const g of stats.groups ?? []) this.set({ source, group: g.group }, g[value]);
      },
    });
  const metric = (
    kind: 'Counter' | 'Histogram',
    name: string,
    help: string,
    labelNames: string[],
    extra = {},
  ) =>
    registry.getSingleMetric(name) ??
    new client[kind]({ name, help, labelNames, registers: [registry], ...extra });
  const n = METRIC_NAMES;
  return {
    sources,
    m: {
      deliveries: metric('Counter', n.deliveries, 'Deliveries received, by outcome', ['source', 'outcome']),
      handlerDuration: metric(
        'Histogram',
        n.handlerDuration,
        'Time the handler ran, by outcome (processed: returned and its transaction committed; failed: threw)',
        ['source', 'outcome'],
        { buckets: LATENCY_BUCKETS },
      ),
      claimToCommit: metric(
        'Histogram',
        n.claimToCommit,
        'Time from the claim to the commit of a delivery (locks are held meanwhile)',
        ['source'],
        { buckets: LATENCY_BUCKETS },
      ),
      claimBatchSize: metric(
        'Histogram',
        n.claimBatchSize,
        'Deferred mode: claims sent in one statement (one commit when it succeeds)',
        ['source'],
        { buckets: BATCH_BUCKETS },
      ),
      acknowledgement: metric(
        'Histogram',
        n.acknowledgement,
        "Deferred mode: time from a delivery's claim to its batch's commit",
        ['source'],
        { buckets: LATENCY_BUCKETS },
      ),
      duplicates: metric(
        'Counter',
        n.duplicates,
        "Duplicate deliveries, by what answered them (memory: this instance's LRU; redis; postgres)",
        ['source', 'answered_by'],
      ),
      heldEvents: gauge(n.heldEvents, 'Events held, waiting for an earlier seq of their key', (s) => s.held),
      oldestHeldAge: gauge(n.oldestHeldAge, 'Age of the oldest held event, in seconds (0 when none)', (s) =>
        s.oldestHeldAgeMs === null ? 0 : s.oldestHeldAgeMs / 1000,
      ),
      blockedKeys: gauge(
        n.blockedKeys,
        'Keys blocked for an operator (gap timeout or poison)',
        (s) => s.blockedKeys,
      ),
      deadLetterEvents: gauge(n.deadLetterEvents, 'Dead-lettered events stored now', (s) => s.deadLetters),
      pendingEvents: gauge(n.pendingEvents, 'Events waiting for a worker or a retry', (s) => s.pending),
      oldestBlockedKeyAge: gauge(
        n.oldestBlockedKeyAge,
        'How long the longest-blocked key has been blocked, in seconds (0 when none is)',
        (s) => (s.oldestBlockedAgeMs === null ? 0 : s.oldestBlockedAgeMs / 1000),
      ),
      databaseUp: (() => {
        const existing = registry.getSingleMetric(n.databaseUp);
        if (existing) return existing;
        return new client.Gauge({
          name: n.databaseUp,
          help: "1 when the inbox's stats query answered at the last scrape, 0 when it failed",
          labelNames: ['source'],
          registers: [registry],
          async collect(this: any) {
            await read();
            for (const [source, up] of answered) this.set({ source }, up ? 1 : 0);
          },
        });
      })(),
      gapTimeouts: metric('Counter', n.gapTimeouts, 'Gap timeouts, by action (skipped or blocked)', [
        'source',
        'action',
      ]),
      deadLetters: metric(
        'Counter',
        n.deadLetters,
        'Events dead-lettered, by reason (poison, late, rejected)',
        ['source', 'reason'],
      ),
      deadLetterCauses: metric(
        'Counter',
        n.deadLetterCauses,
        "Events dead-lettered after a failed run, by cause (the error's fingerprint: webhook-inbox dead groups)",
        ['source', 'cause'],
      ),
      seqConflicts: metric(
        'Counter',
        n.seqConflicts,
        'Deliveries refused (422) for a new id at a seq its key already applied or holds, by reason (applied, waiting)',
        ['source', 'reason'],
      ),
      ignored: metric(
        'Counter',
        n.ignored,
        `Events no handler takes (option handlers), recorded ignored, by type (none: no type; other: past ${MAX_TYPE_LABELS} types)`,
        ['source', 'type'],
      ),
      groupUnreadable: metric(
        'Counter',
        n.groupUnreadable,
        'Deliveries whose group (option groups.by) could not be read; stored without a group',
        ['source'],
      ),
      groupPending: groupGauge(
        n.groupPending,
        `Option groups: unordered events waiting, for the ${MAX_GROUP_LABELS} busiest groups`,
        'pending',
      ),
      groupRunning: groupGauge(
        n.groupRunning,
        `Option groups: handlers running now over every instance, for the ${MAX_GROUP_LABELS} busiest groups`,
        'running',
      ),
      drainLatency: metric(
        'Histogram',
        n.drainLatency,
        'Duration of a drain that applied held events, from its start to its last commit',
        ['source'],
        { buckets: DRAIN_BUCKETS },
      ),
      sweeperRuns: metric('Counter', n.sweeperRuns, 'Sweeper passes', ['source']),
      sweeperErrors: metric('Counter', n.sweeperErrors, 'Sweeper passes that failed', ['source']),
      redisFallbacks: metric(
        'Counter',
        n.redisFallbacks,
        'Deliveries the Redis fast path could not answer, by reason (miss, timeout, error, unavailable, busy)',
        ['source', 'reason'],
      ),
      redisWriteErrors: metric(
        'Counter',
        n.redisWriteErrors,
        'Redis writes of processed events that failed or timed out',
        ['source'],
      ),
      lookFirstErrors: metric(
        'Counter',
        n.lookFirstErrors,
        "Reads before BEGIN (a retry storm's primary-key read of a duplicate) that failed; the claim answered the delivery",
        ['source'],
      ),
    },
  };
}

/** Registers the inbox's metrics in `registry` (or reuses another inbox's) bound to `source`. */
/** `label`, or `other` once `seen` holds MAX_TYPE_LABELS others. */
function capped(seen: Set<string>, label: string): string {
  if (seen.has(label)) return label;
  if (seen.size >= MAX_TYPE_LABELS) return 'other';
  seen.add(label);
  return label;
}

export async function createMetrics(
  registry: RegistryLike,
  source: string,
  stats: () => Promise<InboxStats>,
): Promise<{ metrics: InboxMetrics; detach(): void }> {
  let s = shared.get(registry);
  if (!s) {
    s = define(await loadPromClient(), registry);
    shared.set(registry, s);
  }
  const { m, sources } = s;
  const entry: StatsSource = { source, stats };
  sources.add(entry);
  // Children bound once per label set: a Map lookup on the delivery path, not label hashing.
  const bound = (metric: any, label: string) => {
    const children = new Map<string, any>();
    return (value: string) => {
      let child = children.get(value);
      if (!child) {
        child = metric.labels({ source, [label]: value });
        children.set(value, child);
      }
      return child;
    };
  };
  const deliveries = bound(m.deliveries, 'outcome');
  const duplicates = bound(m.duplicates, 'answered_by');
  const handler = bound(m.handlerDuration, 'outcome');
  const gapTimeouts = bound(m.gapTimeouts, 'action');
  const deadLetters = bound(m.deadLetters, 'reason');
  const deadLetterCauses = bound(m.deadLetterCauses, 'cause');
  const causeLabels = new Set<string>();
  const fallbacks = bound(m.redisFallbacks, 'reason');
  const seqConflicts = bound(m.seqConflicts, 'reason');
  const ignoredTypes = bound(m.ignored, 'type');
  const typeLabels = new Set<string>();
  const groupUnreadable = m.groupUnreadable.labels({ source });
  const claimToCommit = m.claimToCommit.labels({ source });
  const claimBatch = m.claimBatchSize.labels({ source });
  const acknowledgement = m.acknowledgement.labels({ source });
  const drain = m.drainLatency.labels({ source });
  const sweeperRuns = m.sweeperRuns.labels({ source });
  const sweeperErrors = m.sweeperErrors.labels({ source });
  const writeErrors = m.redisWriteErrors.labels({ source });
  const lookFirstErrors = m.lookFirstErrors.labels({ source });
  // Series that alerts look at exist from the start, at 0, so that rate() sees their first increase.
  for (const outcome of [OutcomeKind.processed, OutcomeKind.duplicate, OutcomeKind.failed])
    deliveries(outcome).inc(0);
  duplicates('memory').inc(0);
  duplicates('redis').inc(0);
  duplicates('postgres').inc(0);
  deadLetters('poison').inc(0);
  deadLetters('late').inc(0);
  deadLetters('rejected').inc(0);
  seqConflicts('applied').inc(0);
  sweeperErrors.inc(0);
  writeErrors.inc(0);
  lookFirstErrors.inc(0);
  return {
    metrics: {
      delivery: (outcome) => deliveries(outcome).inc(),
      duplicate: (answeredBy) => duplicates(answeredBy).inc(),
      handler: (seconds, outcome) => handler(outcome).observe(seconds),
      claimToCommit: (seconds) => claimToCommit.observe(seconds),
      claimBatch: (size) => claimBatch.observe(size),
      acknowledgement: (seconds) => acknowledgement.observe(seconds),
      gapTimeout: (action) => gapTimeouts(action).inc(),
      deadLetter: (reason) => deadLetters(reason).inc(),
      deadLetterCause: (cause) => deadLetterCauses(capped(causeLabels, cause)).inc(),
      seqConflict: (reason) => seqConflicts(reason).inc(),
      ignored: (type) => ignoredTypes(capped(typeLabels, type ?? 'none')).inc(),
      groupUnreadable: () => groupUnreadable.inc(),
      drain: (seconds) => drain.observe(seconds),
      sweeperRun: () => sweeperRuns.inc(),
      sweeperError: () => sweeperErrors.inc(),
      redisFallback: (reason) => fallbacks(reason).inc(),
      redisWriteError: () => writeErrors.inc(),
      lookFirstError: () => lookFirstErrors.inc(),
    },
    detach: () => sources.delete(entry),
  };
}
