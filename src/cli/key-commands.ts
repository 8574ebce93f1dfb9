import { OperationError } from '../errors.js';
import { FILTERS, limit, lockedAction } from './arguments.js';
import { type Command, EXIT } from './command.js';
import { deadLetterSummary, KEY_COLUMNS, line, seqRange, skipText, table } from './format.js';
import { safeField } from './terminal-safe.js';

export const KEY_COMMANDS: Record<string, Command> = {
  'keys list': {
    summary: 'keys that are blocked or hold events, longest waiting first',
    usage: 'webhook-inbox keys list [--blocked] [--limit N] [options]',
    options: {
      blocked: { type: 'boolean', help: 'only blocked keys' },
      limit: FILTERS.limit,
    },
    positionals: [0, 0],
    check({ values }) {
      limit(values);
    },
    async run({ values, out, connection }) {
      const keys = await (await connection.ops()).keys({
        blocked: values.blocked === true,
        limit: limit(values),
      });
      out.result(keys, (k) => table(k, KEY_COLUMNS));
      return EXIT.ok;
    },
  },
  'keys show': {
    summary: 'one key: cursor, state, held seqs, gaps, dead letters',
    usage: 'webhook-inbox keys show <key> [options]',
    positionals: [1, 1],
    async run({ positionals, out, connection }) {
      const k = await (await connection.ops()).key(positionals[0]);
      if (!k) throw new OperationError('not-found', `no key ${JSON.stringify(positionals[0])}`);
      out.result({ ...k, deadLetters: k.deadLetters.map(deadLetterSummary) }, () =>
        [
          table([k], KEY_COLUMNS),
          line('held seqs', k.heldSeqs.join(', ') || null),
          line('gaps', k.gaps.map((g) => `${seqRange(g.fromSeq, g.toSeq)} (${g.reason})`).join(', ') || null),
          line(
            'dead letters',
            k.deadLetters.map((d) => `${d.id} seq ${d.seq} (${d.deadReason})`).join(', ') || null,
          ),
        ].join('\n'),
      );
      return EXIT.ok;
    },
  },
  'keys unblock': {
    summary: 'reopen a blocked key without moving its cursor',
    usage: 'webhook-inbox keys unblock <key> [options]',
    help:
      'What waits at the cursor is then applied by the sweeper. If nothing does (a missing seq, a\n' +
      'dead letter you did not replay), the key waits for it again and the gap timeout decides.\n' +
      'To move past the seq, use `keys skip`; to retry a dead letter, `dead replay`.',
    ...lockedAction(async (ops, key, bound, out) =>
      out.result(await ops.unblock(key, ops.source, bound), (k) =>
        safeField(`key ${k.key} (${k.source}) is open; it waits for seq ${k.nextSeq}`),
      ),
    ),
  },
  'keys skip': {
    summary: 'move a blocked key past what blocks it (a poison seq, or a missing range)',
    usage: 'webhook-inbox keys skip <key> [options]',
    ...lockedAction(async (ops, key, bound, out) => out.result(await ops.skip({ key }, bound), skipText)),
  },
};
