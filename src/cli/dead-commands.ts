import { formatDuration } from '../duration.js';
import type { SkipResult } from '../operations/index.js';
import { FILTERS, filterOf, LOCK_TIMEOUT, lockTimeout } from './arguments.js';
import {
  type Command,
  checkConfirmable,
  confirmOrRefuse,
  deadLetters,
  EXIT,
  UsageError,
  type Values,
} from './command.js';
import { deadLetterJson, deadLetterSummary, deadLetterText, oneLine, skipText, table } from './format.js';
import { REPLAY_COMMAND } from './replay-command.js';

function checkFilter({ values }: { values: Values }): void {
  filterOf(values);
}

function leftBlocking(r: { blocking: number }): string {
  return r.blocking ? `; ${r.blocking} left because each blocks its key (dead skip them first)` : '';
}

export const DEAD_COMMANDS: Record<string, Command> = {
  'dead list': {
    summary: 'list dead letters, oldest first',
    usage:
      'webhook-inbox dead list [--reason R] [--cause C] [--key K|prefix*] [--type T] [--since T] [--until T] [--older-than D] [--newer-than D] [--limit N] [options]',
    options: FILTERS,
    positionals: [0, 0],
    check: checkFilter,
    async run({ values, out, connection }) {
      const dead = await (await connection.ops()).deadLetters(filterOf(values));
      out.result(dead.map(deadLetterSummary), () =>
        table(dead, {
          SOURCE: (d) => d.source,
          ID: (d) => d.id,
          KEY: (d) => d.key,
          SEQ: (d) => d.seq,
          TYPE: (d) => d.type,
          REASON: (d) => d.deadReason,
          CAUSE: (d) => d.cause,
          FAILED: (d) => d.failedAt?.toISOString(),
          ATTEMPTS: (d) => d.attempts,
          AGE: (d) => formatDuration(d.ageMs),
          BLOCKING: (d) => (d.blocking ? 'yes' : 'no'),
          'LAST ERROR': (d) => oneLine(d.lastError),
        }),
      );
      return EXIT.ok;
    },
  },
  'dead groups': {
    summary: 'dead letters grouped by cause: counts, first and last failure, keys, a sample',
    usage:
      'webhook-inbox dead groups [--reason R] [--cause C] [--key K|prefix*] [--type T] [--since T] [--until T] [options]',
    help:
      "A cause is a fingerprint of a failed run's error: its type and its message with ids, numbers\n" +
      'and quoted values taken out, so that one bug makes one group whatever the events. Replay a\n' +
      'group with `dead replay --all --cause <cause>` (with --since/--until for a window).',
    options: FILTERS,
    positionals: [0, 0],
    check: checkFilter,
    async run({ values, out, connection }) {
      const groups = await (await connection.ops()).deadGroups(filterOf(values));
      out.result(groups, () =>
        table(groups, {
          CAUSE: (g) => g.cause,
          REASON: (g) => g.reason,
          COUNT: (g) => g.count,
          'FIRST FAILED': (g) => g.firstAt.toISOString(),
          'LAST FAILED': (g) => g.lastAt.toISOString(),
          KEYS: (g) => g.keys,
          SAMPLE: (g) => oneLine(`${g.sample.id}: ${g.sample.error ?? '-'}`),
        }),
      );
      return EXIT.ok;
    },
  },
  'dead purge': {
    summary: 'delete dead letters (and their payloads) a selection matches, in batches',
    usage:
      'webhook-inbox dead purge --older-than D | --all [--reason R] [--cause C] [--key K|prefix*] [--type T] [--since T] [--until T] [--dry-run] [--yes] [options]',
    help:
      'Dead letters keep their payloads until they are replayed or purged; purge them when the\n' +
      "bodies hold personal data (or set the inbox's deadRetention). A dead letter that blocks its\n" +
      'key is never purged (its key would stay blocked): `dead skip` it first. Deletes in batches,\n' +
      'each its own statement: an interrupted purge is finished by running it again. --dry-run\n' +
      'counts and changes nothing.',
    options: {
      all: { type: 'boolean', help: 'every dead letter matching the filters (without --older-than)' },
      ...FILTERS,
      'dry-run': { type: 'boolean', help: 'count what would be purged; delete nothing' },
      yes: { type: 'boolean', short: 'y', help: 'do not ask for confirmation' },
    },
    positionals: [0, 0],
    check({ values, io }) {
      filterOf(values);
      if (values['older-than'] === undefined && !values.all) {
        throw new UsageError('give --older-than (e.g. 30d), or --all with filters');
      }
      checkConfirmable(values, io, 'dead purge deletes dead letters for good', 'count them first');
    },
    async run({ values, out, io, connection }) {
      const ops = await connection.ops();
      const selection = filterOf(values);
      const plan = await ops.purgeDead(selection, { dryRun: true });
      if (values['dry-run']) {
        out.result(
          plan,
          (r) => `would purge ${r.purged} dead letters${leftBlocking(r)}; nothing was changed.`,
        );
        return EXIT.ok;
      }
      await confirmOrRefuse(
        values,
        io,
        plan.purged,
        `Delete ${plan.purged} dead letters and their payloads for good?`,
      );
      const result = await ops.purgeDead(selection);
      out.result(result, (r) => `purged ${r.purged} dead letters${leftBlocking(r)}`);
      return EXIT.ok;
    },
  },
  'dead show': {
    summary: 'one dead letter (or any stored event) with its payload and last error',
    usage: 'webhook-inbox dead show <id> [--raw] [options]',
    help:
      'Control and escape characters (C0, C1, DEL, ANSI/OSC sequences, bidi and zero-width\n' +
      'characters) in what the sender or the handler wrote are shown escaped (\\x1b, \\u{202e}).\n' +
      '--raw writes the payload bytes to stdout exactly as they were received, and nothing else:\n' +
      'redirect it to a file (`> payload.bin`) rather than to the terminal.',
    options: { raw: { type: 'boolean', help: 'write the payload bytes as they are, nothing else' } },
    positionals: [1, 1],
    check({ values }) {
      if (values.raw && values.json) throw new UsageError('give --raw or --json, not both');
    },
    async run({ values, positionals, out, io, connection }) {
      const d = await (await connection.ops()).deadLetter(positionals[0]);
      if (values.raw) {
        if (d.payload) io.raw(d.payload);
        return EXIT.ok;
      }
      out.result(deadLetterJson(d), () => deadLetterText(d));
      return EXIT.ok;
    },
  },
  'dead replay': REPLAY_COMMAND,
  'dead skip': {
    summary: "skip dead letters' seqs: record each as a gap, unblock its key",
    usage:
      'webhook-inbox dead skip <id> | --all [--reason R] [--cause C] [--key K|prefix*] [--type T] [--since T] [--until T] [--dry-run] [--yes] [options]',
    help:
      'The key moves past the dead letter\'s seq (recorded as a gap, reason "skip"); the running\n' +
      "application's sweeper then drains the events held behind it. The dead letter stays, as a record.\n" +
      '--all skips every matching ordered dead letter its key waits for, in key order, in batches;\n' +
      'an interrupted run is finished by running it again (what was skipped is behind its cursor now).',
    options: {
      all: { type: 'boolean', help: 'every matching ordered dead letter its key waits for' },
      ...FILTERS,
      'dry-run': { type: 'boolean', help: 'count and show the first ones; change nothing' },
      yes: { type: 'boolean', short: 'y', help: 'with --all: do not ask for confirmation' },
      'lock-timeout': LOCK_TIMEOUT,
    },
    positionals: [0, 1],
    check({ values, positionals, io }) {
      lockTimeout(values);
      filterOf(values);
      if (Boolean(values.all) === (positionals.length === 1))
        throw new UsageError('give one id, or --all with filters');
      const what = 'dead skip --all moves keys past their dead letters for good';
      if (values.all) checkConfirmable(values, io, what, 'see them first');
    },
    async run({ values, positionals, out, io, connection }) {
      const ops = await connection.ops();
      if (!values.all) {
        out.result(await ops.skip({ id: positionals[0]! }, { lockTimeoutMs: lockTimeout(values) }), skipText);
        return EXIT.ok;
      }
      const selection = { ...filterOf(values), atCursor: true };
      const count = await ops.countDead(selection);
      if (values['dry-run']) {
        const sample = await ops.deadLetters({ ...selection, order: 'key', limit: 20 });
        out.result({ dryRun: true, count, sample: sample.map(deadLetterSummary) }, () =>
          [
            `${deadLetters(count)} would be skipped${count > sample.length ? `; the first ${sample.length} in key order:` : ':'}`,
            table(sample, {
              SOURCE: (d) => d.source,
              ID: (d) => d.id,
              KEY: (d) => d.key,
              SEQ: (d) => d.seq,
              REASON: (d) => d.deadReason,
              CAUSE: (d) => d.cause,
            }),
            'Nothing was changed.',
          ].join('\n'),
        );
        return EXIT.ok;
      }
      await confirmOrRefuse(values, io, count, `Skip ${deadLetters(count)} for good?`);
      const skipped: SkipResult[] = [];
      for await (const batch of ops.deadBatches(selection)) {
        for (const d of batch) skipped.push(await ops.skip(d, { lockTimeoutMs: lockTimeout(values) }));
      }
      out.result(skipped, (r) => [...r.map(skipText), `${r.length} skipped.`].join('\n'));
      return EXIT.ok;
    },
  },
};
