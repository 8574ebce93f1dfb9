/** `dead replay`: a dry run of the same checks first, to show it, refuse events past retention, or ask. */
import { formatDuration } from '../duration.js';
import { OperationError } from '../errors.js';
import type { ReplayResult } from '../operations/index.js';
import { FILTERS, filterOf, LOCK_TIMEOUT, lockTimeout, retentionOf } from './arguments.js';
import {
  type CliIo,
  type Command,
  checkConfirmable,
  confirmOrRefuse,
  deadLetters,
  EXIT,
  type OpenedOperations,
  type Out,
  RefusedError,
  UsageError,
  type Values,
} from './command.js';
import { table } from './format.js';
import { safeField } from './terminal-safe.js';

function replayExit(results: ReplayResult[]): number {
  if (results.some((r) => r.outcome === 'ambiguous')) return EXIT.usage;
  if (results.some((r) => r.outcome === 'not-found')) return EXIT.notFound;
  if (results.some((r) => r.outcome !== 'requeued')) return EXIT.refused;
  return EXIT.ok;
}

/** Each dead letter's age, by source and id: what the retention check compares. */
type Ages = (r: { source: string | null; id: string }) => number | undefined;

function agesIn(dead: readonly { source: string; id: string; ageMs: number }[]): Ages {
  const ages = new Map(dead.map((d) => [`${d.source}\u0000${d.id}`, d.ageMs]));
  return (r) => ages.get(`${r.source}\u0000${r.id}`);
}

async function agesOf(ops: OpenedOperations, ids: string[]): Promise<Ages> {
  const found = [];
  for (const id of ids) {
    // Any error but not-found or ambiguous (reported by the replay) fails: retention needs the age.
    const d = await ops.deadLetter(id).catch((err) => {
      if (err instanceof OperationError && (err.code === 'not-found' || err.code === 'ambiguous'))
        return undefined;
      throw err;
    });
    if (d) found.push(d);
  }
  return agesIn(found);
}

/** A dry run's rows for --json: the outcome as it would be, the age, and whether it needs --force. */
function wouldBe(plan: ReplayResult[], ageOf: Ages, old: (r: ReplayResult, ageMs: number | null) => boolean) {
  return plan.map((r) => {
    const ageMs = ageOf(r) ?? null;
    const outcome = r.outcome === 'requeued' ? 'would-requeue' : r.outcome;
    return { ...r, outcome, ageMs, olderThanRetention: old(r, ageMs) };
  });
}

/** How many dead letters a dry run of `--all` shows, in key order, beside the count. */
const SAMPLE = 20;

const UNTOLD =
  'Their dedup records may be pruned, so the inbox cannot tell whether they were applied another way since ' +
  '(re-sent under a new id, fixed by hand).';

/** `--all`: times pinned once and printed, so a re-run after an interruption selects the same window. */
async function replayAll(
  ops: OpenedOperations,
  values: Values,
  out: Out,
  io: CliIo,
  retentionMs: number,
): Promise<number> {
  const filter = filterOf(values);
  const count = Math.min(await ops.countDead(filter), filter.limit ?? Number.POSITIVE_INFINITY);
  const old = Math.min(
    count,
    await ops.countDead({ ...filter, olderThan: Math.max(filter.olderThan ?? 0, retentionMs) }),
  );
  const window = {
    since: filter.since?.toISOString() ?? null,
    until: filter.until?.toISOString() ?? null,
  };
  if (values['dry-run']) {
    const sample = await ops.deadLetters({
      ...filter,
      order: 'key',
      limit: Math.min(SAMPLE, filter.limit ?? SAMPLE),
    });
    const plan = await ops.replay(
      sample.map((d) => ({ id: d.id, source: d.source })),
      { dryRun: true },
    );
    const ages = agesIn(sample);
    const rows = wouldBe(plan, ages, (_, ageMs) => ageMs !== null && ageMs > retentionMs);
    const result = { dryRun: true, count, olderThanRetention: old, ...window, sample: rows };
    out.result(result, () =>
      [
        `${deadLetters(count)} match${window.since || window.until ? ` (failed ${window.since ?? '…'} to ${window.until ?? 'now'})` : ''}` +
          (old ? `; ${old} only with --force (older than the retention)` : '') +
          (count > plan.length ? `; the first ${plan.length} in key order:` : ':'),
        resultTable(plan, ages, retentionMs, true),
        'Nothing was changed.',
      ].join('\n'),
    );
    return EXIT.ok;
  }
  if (old > 0 && !values.force) {
    throw new RefusedError(
      'older-than-retention',
      `${old} of the ${count} dead letters to replay ${old === 1 ? 'was' : 'were'} received longer ago than the retention (${formatDuration(retentionMs)}). ` +
        `${UNTOLD} List them with \`dead list --older-than ` +
        `${formatDuration(retentionMs)}\`, then pass --force to replay them (or --retention with your inbox's retention). Nothing was changed.`,
      { count: old },
    );
  }
  await confirmOrRefuse(values, io, count, `Re-queue ${deadLetters(count)} for the application to apply?`);
  // A key held past the timeout fails it (exit 4); the batches before stay re-queued, a re-run goes on.
  const results = await ops.replay({ all: true, ...filter }, { lockTimeoutMs: lockTimeout(values) });
  return requeued(out, results, () => undefined);
}

function requeued(out: Out, results: ReplayResult[], ages: Ages): number {
  out.result(results, () =>
    [
      resultTable(results, ages, Number.POSITIVE_INFINITY, false),
      `${results.filter((r) => r.outcome === 'requeued').length} of ${results.length} re-queued; the application's sweeper applies them.`,
    ].join('\n'),
  );
  return replayExit(results);
}

function resultTable(results: ReplayResult[], age: Ages, retentionMs: number, dryRun: boolean) {
  return table(results, {
    SOURCE: (r) => r.source,
    ID: (r) => r.id,
    KEY: (r) => r.key,
    SEQ: (r) => r.seq,
    AGE: (r) => (age(r) === undefined ? null : formatDuration(age(r)!)),
    OUTCOME: (r) => {
      const outcome = dryRun && r.outcome === 'requeued' ? 'would re-queue' : r.outcome;
      const old = r.outcome === 'requeued' && (age(r) ?? 0) > retentionMs;
      return old ? `${outcome} (needs --force: older than retention)` : outcome;
    },
  });
}

export const REPLAY_COMMAND: Command = {
  summary: "re-queue dead letters; the application's sweeper applies them in order",
  usage:
    'webhook-inbox dead replay <id>... | --all [--reason R] [--cause C] [--key K|prefix*] [--type T] [--since T] [--until T] [--older-than D] [--newer-than D] [--limit N] [--dry-run] [--yes] [--force] [--retention D]',
  help:
    'Replay is a re-queue, not a bypass: the event becomes waiting again (attempts reset), an\n' +
    "ordered one at its key's cursor (the key is unblocked when it was blocked at its seq), and\n" +
    'the running application applies it with its handler, in seq order. Fix the handler first.\n' +
    'An ordered event whose key moved past its seq is refused (it would apply out of order).\n' +
    '\n' +
    'An event received longer ago than your retention (--retention, else WEBHOOK_INBOX_RETENTION,\n' +
    "else 7d: the inbox's default) comes from a time whose dedup records may be pruned: the\n" +
    'inbox can no longer tell whether it was applied another way since (re-sent under a new id,\n' +
    'fixed by hand). Such a replay changes nothing and exits 4 unless you pass --force.\n' +
    '\n' +
    '--all selects by the filters (--cause from `dead groups`; --since/--until: when they failed)\n' +
    'and asks for confirmation on a terminal; without one it needs --yes. --dry-run shows how many\n' +
    'match and the first 20 in key order, and changes nothing. They are re-queued in key order, in\n' +
    'batches, each event its own transaction: if the command is interrupted, run it again with the\n' +
    'same filters (absolute times, as the dry run prints them) and it finishes the job; what was\n' +
    're-queued is no longer dead, so nothing is replayed twice.',
  options: {
    all: { type: 'boolean', help: 'replay every dead letter matching the filters' },
    ...FILTERS,
    'dry-run': { type: 'boolean', help: 'show what would be re-queued; change nothing' },
    yes: { type: 'boolean', short: 'y', help: 'with --all: do not ask for confirmation' },
    force: { type: 'boolean', help: 'also replay events received longer ago than the retention' },
    retention: {
      type: 'string',
      help: "your inbox's retention option (default: $WEBHOOK_INBOX_RETENTION, else 7d)",
    },
    'lock-timeout': LOCK_TIMEOUT,
  },
  positionals: [0, 1000],
  check({ values, positionals, io, env }) {
    const filter = filterOf(values);
    retentionOf(values, 'retention', env);
    lockTimeout(values);
    const filtered = Object.values(filter).some((v) => v !== undefined);
    if (values.all && positionals.length > 0) throw new UsageError('give ids, or --all, not both');
    if (!values.all && positionals.length === 0) throw new UsageError('give the ids to replay, or --all');
    if (!values.all && filtered)
      throw new UsageError(
        '--key, --reason, --cause, --type, --since, --until, --older-than, --newer-than and --limit need --all',
      );
    const what = 'dead replay --all re-queues every matching dead letter';
    if (values.all) checkConfirmable(values, io, what, 'see them first');
  },
  async run({ values, positionals, out, io, env, connection }) {
    const ops = await connection.ops();
    // WEBHOOK_INBOX_RETENTION false: nothing is pruned, so no dead letter is too old to replay.
    const retentionMs = retentionOf(values, 'retention', env) || Number.POSITIVE_INFINITY;
    if (values.all) return replayAll(ops, values, out, io, retentionMs);
    const ages = await agesOf(ops, positionals);
    const plan = await ops.replay(positionals, { dryRun: true });
    const requeueable = plan.filter((r) => r.outcome === 'requeued');
    const old = requeueable.filter((r) => (ages(r) ?? 0) > retentionMs);
    if (values['dry-run']) {
      out.result(
        wouldBe(plan, ages, (r) => old.includes(r)),
        () =>
          [
            resultTable(plan, ages, retentionMs, true),
            `${requeueable.length} of ${plan.length} would be re-queued` +
              (old.length ? `, ${old.length} only with --force (older than the retention)` : '') +
              '; nothing was changed.',
          ].join('\n'),
      );
      return replayExit(plan);
    }
    if (old.length > 0 && !values.force) {
      const listed = old
        .map((r) => `${safeField(r.id)} (${safeField(r.source ?? '-')}, ${formatDuration(ages(r)!)} old)`)
        .join(', ');
      throw new RefusedError(
        'older-than-retention',
        `${old.length} of the dead letters to replay ${old.length === 1 ? 'was' : 'were'} received longer ago than the retention (${formatDuration(retentionMs)}): ${listed}. ` +
          `${UNTOLD} Check them with \`dead show <id>\`, then pass --force to replay them ` +
          "(or --retention with your inbox's retention). Nothing was changed.",
        { events: old.map((r) => ({ source: r.source, id: r.id, ageMs: ages(r) })) },
      );
    }
    // As for --all: a key held past the timeout fails the command; the ids before it stay re-queued.
    return requeued(out, await ops.replay(positionals, { lockTimeoutMs: lockTimeout(values) }), ages);
  },
};
