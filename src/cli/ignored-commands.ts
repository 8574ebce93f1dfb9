import { formatDuration } from '../duration.js';
import { FILTERS, limit } from './arguments.js';
import { type Command, EXIT, UsageError, type Values } from './command.js';
import { table } from './format.js';

const TYPE = {
  type: 'string',
  help: 'only events of this type (as the provider names it: invoice.paid)',
} as const;

function typeOf(values: Values, required: boolean): string | undefined {
  const type = values.type;
  if (type === undefined) {
    if (required) throw new UsageError('--type is required: the type whose ignored events to replay');
    return undefined;
  }
  if (typeof type !== 'string' || type === '') throw new UsageError('--type must be an event type');
  return type;
}

export const IGNORED_COMMANDS: Record<string, Command> = {
  'ignored list': {
    summary: 'events no handler takes, newest first, and their count by type',
    usage: 'webhook-inbox ignored list [--type T] [--limit N] [options]',
    help:
      'An event whose type no handler takes (option `handlers`) is recorded "ignored" and\n' +
      'answered 200, with its payload kept until retention. Without --type, the counts by type\n' +
      'come first: what the provider sends that nobody handles.',
    options: { type: TYPE, limit: FILTERS.limit },
    positionals: [0, 0],
    check({ values }) {
      typeOf(values, false);
      limit(values);
    },
    async run({ values, out, connection }) {
      const ops = await connection.ops();
      const type = typeOf(values, false);
      const types = type === undefined ? await ops.ignoredTypes() : [];
      const events = await ops.ignored({ type, limit: limit(values) });
      const listed = events.map(({ payload: _payload, ...rest }) => rest);
      out.result({ types, events: listed }, () =>
        [
          ...(type === undefined
            ? [
                table(types, {
                  SOURCE: (t) => t.source,
                  TYPE: (t) => t.type,
                  COUNT: (t) => t.count,
                  'LAST RECEIVED': (t) => t.lastReceivedAt.toISOString(),
                }),
                '',
              ]
            : []),
          table(events, {
            SOURCE: (e) => e.source,
            ID: (e) => e.id,
            TYPE: (e) => e.type,
            KEY: (e) => e.key,
            SEQ: (e) => e.seq,
            AGE: (e) => formatDuration(e.ageMs),
          }),
        ].join('\n'),
      );
      return EXIT.ok;
    },
  },
  'ignored replay': {
    summary: "re-queue the ignored events of one type; the application's sweeper applies them",
    usage: 'webhook-inbox ignored replay --type T [--dry-run] [options]',
    help:
      'Write and deploy the handler for the type first: the running application applies each\n' +
      're-queued event with the handler that takes its type then (or records it ignored again).\n' +
      'Each event is re-queued once: a second run finds nothing of that type left ignored.\n' +
      "Ordered events (a key and seq) are counted and left: their key's cursor moved past them.",
    options: {
      type: TYPE,
      'dry-run': { type: 'boolean', help: 'count what would be re-queued; change nothing' },
    },
    positionals: [0, 0],
    check({ values }) {
      typeOf(values, true);
    },
    async run({ values, out, connection }) {
      const ops = await connection.ops();
      const result = await ops.replayIgnored({
        type: typeOf(values, true)!,
        dryRun: values['dry-run'] === true,
      });
      out.result(result, (r) =>
        [
          r.dryRun
            ? `${r.requeued} ignored ${r.type} event(s) would be re-queued; nothing was changed.`
            : `${r.requeued} ignored ${r.type} event(s) re-queued; the application's sweeper applies them.`,
          ...(r.ordered > 0
            ? [`${r.ordered} ordered event(s) left ignored: their key moved past them.`]
            : []),
        ].join('\n'),
      );
      return EXIT.ok;
    },
  },
};
