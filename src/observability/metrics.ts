/** Prometheus metrics in the app's prom-client `Registry`; no id labels, query gauges at scrape time. */
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
  pending: number;
  oldestBlockedAgeMs: number | null;
  /** Option `groups`: the busiest groups (at most MAX_GROUP_LABELS). */
  groups?: ReadonlyArray<{ readonly group: string; readonly pending: number; readonly running: number }>;
}

export interface InboxMetrics {
  delivery(outcome: OutcomeKind): void;
  duplicate(answeredBy: 'memory' | 'redis' | 'postgres'): void;
  handler(seconds: number, outcome: 'processed' | 'failed'): void;
  claimToCommit(seconds: number): void;
  claimBatch(size: number): void;
  acknowledgement(seconds: number): void;
  gapTimeout(action: 'skipped' | 'blocked'): void;
  deadLetter(reason: string): void;
  deadLetterCause(cause: string): void;
  seqConflict(reason: 'applied' | 'waiting'): void;
  ignored(type: string | null): void;
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
        // A failed query leaves the source out: a scrape must not fail when the database is down.
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
  const gauge = (
    name: string,
    help: string,
    set: (g: any, bySource: Map<string, InboxStats>) => void,
    labelNames = ['source'],
  ) =>
    registry.getSingleMetric(name) ??
    new client.Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      async collect(this: any) {
        set(this, await read());
      },
    });
  const perSource = (name: string, help: string, value: (s: InboxStats) => number) =>
    gauge(name, help, (g, bySource) => {
      for (const [source, stats] of bySource) g.set({ source }, value(stats));
    });
  // Only this scrape's busiest: a group that left them leaves no stale series.
  const perGroup = (name: string, help: string, value: 'pending' | 'running') =>
    gauge(
      name,
      help,
      (g, bySource) => {
        g.reset();
        for (const [source, stats] of bySource)
          for (const group of stats.groups ?? []) g.set({ source, group: group.group }, group[value]);
      },
      ['source', 'group'],
    );
  const counter = (name: string, help: string, label?: string) =>
    registry.getSingleMetric(name) ??
    new client.Counter({
      name,
      help,
      labelNames: label ? ['source', label] : ['source'],
      registers: [registry],
    });
  const histogram = (name: string, help: string, buckets: number[], label?: string) =>
    registry.getSingleMetric(name) ??
    new client.Histogram({
      name,
      help,
      buckets,
      labelNames: label ? ['source', label] : ['source'],
      registers: [registry],
    });
  const n = METRIC_NAMES;
  return {
    sources,
    m: {
      deliveries: counter(n.deliveries, 'Deliveries received, by outcome', 'outcome'),
      handlerDuration: histogram(
        n.handlerDuration,
        'Time the handler ran, by outcome (processed: returned and its transaction committed; failed: threw)',
        LATENCY_BUCKETS,
        'outcome',
      ),
      claimToCommit: histogram(
        n.claimToCommit,
        'Time from the claim to the commit of a delivery (locks are held meanwhile)',
        LATENCY_BUCKETS,
      ),
      claimBatchSize: histogram(
        n.claimBatchSize,
        'Deferred mode: claims sent in one statement (one commit when it succeeds)',
        BATCH_BUCKETS,
      ),
      acknowledgement: histogram(
        n.acknowledgement,
        "Deferred mode: time from a delivery's claim to its batch's commit",
        LATENCY_BUCKETS,
      ),
      duplicates: counter(
        n.duplicates,
        "Duplicate deliveries, by what answered them (memory: this instance's LRU; redis; postgres)",
        'answered_by',
      ),
      heldEvents: perSource(
        n.heldEvents,
        'Events held, waiting for an earlier seq of their key',
        (s) => s.held,
      ),
      oldestHeldAge: perSource(
        n.oldestHeldAge,
        'Age of the oldest held event, in seconds (0 when none)',
        (s) => (s.oldestHeldAgeMs === null ? 0 : s.oldestHeldAgeMs / 1000),
      ),
      blockedKeys: perSource(
        n.blockedKeys,
        'Keys blocked for an operator (gap timeout or poison)',
        (s) => s.blockedKeys,
      ),
      deadLetterEvents: perSource(
        n.deadLetterEvents,
        'Dead-lettered events stored now',
        (s) => s.deadLetters,
      ),
      pendingEvents: perSource(n.pendingEvents, 'Events waiting for a worker or a retry', (s) => s.pending),
      oldestBlockedKeyAge: perSource(
        n.oldestBlockedKeyAge,
        'How long the longest-blocked key has been blocked, in seconds (0 when none is)',
        (s) => (s.oldestBlockedAgeMs === null ? 0 : s.oldestBlockedAgeMs / 1000),
      ),
      databaseUp: gauge(
        n.databaseUp,
        "1 when the inbox's stats query answered at the last scrape, 0 when it failed",
        (g) => {
          for (const [source, up] of answered) g.set({ source }, up ? 1 : 0);
        },
      ),
      gapTimeouts: counter(n.gapTimeouts, 'Gap timeouts, by action (skipped or blocked)', 'action'),
      deadLetters: counter(
        n.deadLetters,
        'Events dead-lettered, by reason (poison, late, rejected)',
        'reason',
      ),
      deadLetterCauses: counter(
        n.deadLetterCauses,
        "Events dead-lettered after a failed run, by cause (the error's fingerprint: webhook-inbox dead groups)",
        'cause',
      ),
      seqConflicts: counter(
        n.seqConflicts,
        'Deliveries refused (422) for a new id at a seq its key already applied or holds, by reason (applied, waiting)',
        'reason',
      ),
      ignored: counter(
        n.ignored,
        `Events no handler takes (option handlers), recorded ignored, by type (none: no type; other: past ${MAX_TYPE_LABELS} types)`,
        'type',
      ),
      groupUnreadable: counter(
        n.groupUnreadable,
        'Deliveries whose group (option groups.by) could not be read; stored without a group',
      ),
      groupPending: perGroup(
        n.groupPending,
        `Option groups: unordered events waiting, for the ${MAX_GROUP_LABELS} busiest groups`,
        'pending',
      ),
      groupRunning: perGroup(
        n.groupRunning,
        `Option groups: handlers running now over every instance, for the ${MAX_GROUP_LABELS} busiest groups`,
        'running',
      ),
      drainLatency: histogram(
        n.drainLatency,
        'Duration of a drain that applied held events, from its start to its last commit',
        DRAIN_BUCKETS,
      ),
      sweeperRuns: counter(n.sweeperRuns, 'Sweeper passes'),
      sweeperErrors: counter(n.sweeperErrors, 'Sweeper passes that failed'),
      redisFallbacks: counter(
        n.redisFallbacks,
        'Deliveries the Redis fast path could not answer, by reason (miss, timeout, error, unavailable, busy)',
        'reason',
      ),
      redisWriteErrors: counter(
        n.redisWriteErrors,
        'Redis writes of processed events that failed or timed out',
      ),
      lookFirstErrors: counter(
        n.lookFirstErrors,
        "Reads before BEGIN (a retry storm's primary-key read of a duplicate) that failed; the claim answered the delivery",
      ),
    },
  };
}

/** `label`, or `other` once `seen` holds MAX_TYPE_LABELS others. */
function capped(seen: Set<string>, label: string): string {
  if (seen.has(label)) return label;
  if (seen.size >= MAX_TYPE_LABELS) return 'other';
  seen.add(label);
  return label;
}

/** Registers the inbox's metrics in `registry` (or reuses another inbox's) bound to `source`. */
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
  // Series that alerts look at exist from the start, at 0, so that rate() sees their first increase.
  const counting = (metric: any, fromZero = false) => {
    const child = metric.labels({ source });
    if (fromZero) child.inc(0);
    return () => child.inc();
  };
  const observing = (metric: any) => {
    const child = metric.labels({ source });
    return (value: number) => child.observe(value);
  };
  for (const outcome of [OutcomeKind.processed, OutcomeKind.duplicate, OutcomeKind.failed])
    deliveries(outcome).inc(0);
  for (const by of ['memory', 'redis', 'postgres']) duplicates(by).inc(0);
  for (const reason of ['poison', 'late', 'rejected']) deadLetters(reason).inc(0);
  seqConflicts('applied').inc(0);
  return {
    metrics: {
      delivery: (outcome) => deliveries(outcome).inc(),
      duplicate: (answeredBy) => duplicates(answeredBy).inc(),
      handler: (seconds, outcome) => handler(outcome).observe(seconds),
      claimToCommit: observing(m.claimToCommit),
      claimBatch: observing(m.claimBatchSize),
      acknowledgement: observing(m.acknowledgement),
      gapTimeout: (action) => gapTimeouts(action).inc(),
      deadLetter: (reason) => deadLetters(reason).inc(),
      deadLetterCause: (cause) => deadLetterCauses(capped(causeLabels, cause)).inc(),
      seqConflict: (reason) => seqConflicts(reason).inc(),
      ignored: (type) => ignoredTypes(capped(typeLabels, type ?? 'none')).inc(),
      groupUnreadable: counting(m.groupUnreadable),
      drain: observing(m.drainLatency),
      sweeperRun: counting(m.sweeperRuns),
      sweeperError: counting(m.sweeperErrors, true),
      redisFallback: (reason) => fallbacks(reason).inc(),
      redisWriteError: counting(m.redisWriteErrors, true),
      lookFirstError: counting(m.lookFirstErrors, true),
    },
    detach: () => sources.delete(entry),
  };
}
