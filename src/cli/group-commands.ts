import { formatDuration } from '../duration.js';
import { limit } from './arguments.js';
import { type Command, EXIT } from './command.js';
import { table } from './format.js';

export const GROUP_COMMANDS: Record<string, Command> = {
  groups: {
    summary: 'the busiest groups: events waiting, due, running now (every instance), held until',
    usage: 'webhook-inbox groups [--limit N] [options]',
    help:
      'Groups (option `groups`) with the most unordered events waiting, most first. RUNNING counts\n' +
      "the group's handlers running now on every instance (with `groups.concurrency`); HELD UNTIL is\n" +
      'a hold a handler asked for with RetryLater({ group: true }).',
    options: { limit: { type: 'string', help: 'at most this many (default 100; 1-10000)' } },
    positionals: [0, 0],
    check({ values }) {
      limit(values);
    },
    async run({ values, out, connection }) {
      const groups = await (await connection.ops()).groups(limit(values) ?? 100);
      out.result({ groups }, () =>
        table(groups, {
          SOURCE: (g) => g.source,
          GROUP: (g) => g.group,
          PENDING: (g) => g.pending,
          DUE: (g) => g.due,
          RUNNING: (g) => g.running,
          'HELD UNTIL': (g) => g.heldUntil?.toISOString() ?? '',
          OLDEST: (g) => formatDuration(g.oldestAgeMs),
        }),
      );
      return EXIT.ok;
    },
  },
};
