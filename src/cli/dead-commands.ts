/** `dead list`, `dead show`, `dead skip`: the dead-letter queue (`dead replay` has its own module). */
import { formatDuration } from '../duration.js';
import { FILTERS, filterOf, lockedAction } from './arguments.js';
import { type Command, EXIT, UsageError } from './command.js';
import { deadLetterJson, deadLetterSummary, deadLetterText, oneLine, skipText, table } from './format.js';
import { REPLAY_COMMAND } from './replay-command.js';

export const DEAD_COMMANDS: Record<string, Command> = {
  'dead list': {
    summary: 'list dead letters, oldest first',
    usage:
      'webhook-inbox dead list [--key K] [--reason R] [--older-than D] [--newer-than D] [--limit N] [options]',
    options: FILTERS,
    positionals: [0, 0],
    check({ values }) {
      filterOf(values);
    },
    async run({ values, out, connection }) {
      const dead = await (await connection.ops()).deadLetters(filterOf(values));
      out.result(dead.map(deadLetterSummary), () =>
        table(
          ['SOURCE', 'ID', 'KEY', 'SEQ', 'REASON', 'ATTEMPTS', 'AGE', 'BLOCKING', 'LAST ERROR'],
          dead.map((d) => [
            d.source,
            d.id,
            d.key,
            d.seq,
            d.deadReason,
            d.attempts,
            formatDuration(d.ageMs),
            d.blocking ? 'yes' : 'no',
            oneLine(d.lastError),
          ]),
        ),
      );
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
    summary: "skip a dead letter's seq: record it as a gap, unblock its key",
    usage: 'webhook-inbox dead skip <id> [options]',
    help:
      'The key moves past the dead letter\'s seq (recorded as a gap, reason "skip"); the running\n' +
      "application's sweeper then drains the events held behind it. The dead letter stays, as a record.",
    ...lockedAction(async (ops, id, bound, out) => out.result(await ops.skip({ id }, bound), skipText)),
  },
};
