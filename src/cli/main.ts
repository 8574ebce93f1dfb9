/** One command line: find the command, check every argument before anything is opened, run it, map errors to exit codes. */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { OperationError } from '../errors.js';
import { openOperations } from '../operations/index.js';
import { closest } from '../runtime/unknown-options.js';
import { connectionOptions, GLOBAL_OPTIONS } from './arguments.js';
import {
  type CliIo,
  type Command,
  type Connection,
  EXIT,
  type OpenedOperations,
  type Out,
  RefusedError,
  UsageError,
  type Values,
} from './command.js';
import { CONSOLE_COMMAND } from './console-command.js';
import { DEAD_COMMANDS } from './dead-commands.js';
import { GROUP_COMMANDS } from './group-commands.js';
import { commandHelp, groupHelp, topHelp } from './help.js';
import { IGNORED_COMMANDS } from './ignored-commands.js';
import { INBOX_COMMANDS } from './inbox-commands.js';
import { KEY_COMMANDS } from './key-commands.js';
import { safeBlock, safeJson } from './terminal-safe.js';

export const COMMANDS: Record<string, Command> = {
  migrate: INBOX_COMMANDS.migrate,
  status: INBOX_COMMANDS.status,
  ...DEAD_COMMANDS,
  ...IGNORED_COMMANDS,
  ...KEY_COMMANDS,
  ...GROUP_COMMANDS,
  prune: INBOX_COMMANDS.prune,
  'scrub-headers': INBOX_COMMANDS['scrub-headers'],
  console: CONSOLE_COMMAND,
};

const GROUPS = new Set(['dead', 'ignored', 'keys']);

/** The version in the package's own package.json, found upwards from src/, dist/src/ or a bundle. */
function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8'));
      if (pkg.name === 'webhook-inbox') return pkg.version;
    }
    if (dirname(dir) === dir) return 'unknown';
    dir = dirname(dir);
  }
}

function describeFailure(err: unknown, schema: string): string {
  const code = err && typeof err === 'object' && 'code' in err ? String(err.code) : '';
  if (code === '42P01' || code === '42883' || code === '3F000') {
    return `the inbox tables are not in schema ${JSON.stringify(schema)}: run \`webhook-inbox migrate\` (or pass --schema / --table-prefix)`;
  }
  if (['ECONNREFUSED', 'ENOTFOUND', 'ETIMEDOUT', 'EAI_AGAIN', '28P01', '28000', '3D000'].includes(code)) {
    return `cannot connect to the database (${code}): ${err instanceof Error ? err.message : String(err)}`;
  }
  return err instanceof Error ? err.message : String(err);
}

/** The process's own streams; `confirm` only when stdin is a terminal to ask on. */
export function processIo(): CliIo {
  return {
    stdout: (text) => process.stdout.write(`${text}\n`),
    stderr: (text) => process.stderr.write(`${text}\n`),
    raw: (bytes) => process.stdout.write(bytes),
    confirm: process.stdin.isTTY
      ? async (question) => {
          const rl = createInterface({ input: process.stdin, output: process.stderr });
          try {
            return /^\s*y(es)?\s*$/i.test(await rl.question(question));
          } finally {
            rl.close();
          }
        }
      : undefined,
  };
}

function parse(command: Command, rest: string[]): { values: Values; positionals: string[] } {
  const options = Object.fromEntries(
    Object.entries({ ...GLOBAL_OPTIONS, ...command.options }).map(([k, { type, short }]) => [
      k,
      short ? { type, short } : { type },
    ]),
  );
  try {
    return parseArgs({ args: rest, options, allowPositionals: true, strict: true }) as {
      values: Values;
      positionals: string[];
    };
  } catch (err) {
    // Node's own text advises `--` for a positional argument, which a misspelt option is not.
    const unknown = /^Unknown option '(-{1,2})([^'=]+)/.exec((err as Error).message);
    if ((err as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && unknown) {
      const near = unknown[1] === '--' ? closest(unknown[2], Object.keys(options)) : undefined;
      throw new UsageError(
        `unknown option ${unknown[1]}${unknown[2]}${near ? `; did you mean --${near}?` : ''}`,
      );
    }
    throw new UsageError((err as Error).message);
  }
}

function nearestCommand(group: string | undefined, typed: string): string | undefined {
  const names = Object.keys(COMMANDS);
  if (group) {
    const sub = closest(
      typed,
      names.filter((n) => n.startsWith(`${group} `)).map((n) => n.slice(group.length + 1)),
    );
    return sub && `${group} ${sub}`;
  }
  return closest(typed, [...names.filter((n) => !n.includes(' ')), ...GROUPS]);
}

function checkPositionals(name: string, command: Command, positionals: string[]): void {
  const [min, max] = command.positionals;
  if (positionals.length >= min && positionals.length <= max) return;
  const what =
    max === 0
      ? 'takes no arguments'
      : `takes ${min === max ? min : `${min} to ${max}`} argument${max === 1 ? '' : 's'}`;
  throw new UsageError(`${name} ${what}; got ${positionals.length}`);
}

export async function main(
  argv: readonly string[],
  env: Record<string, string | undefined> = process.env,
  io: CliIo = processIo(),
): Promise<number> {
  const json = argv.includes('--json');
  const fail = (code: number, kind: string, message: string, details?: Record<string, unknown>) => {
    if (json) io.stderr(safeJson({ error: { code: kind, message, ...details }, exitCode: code }));
    else io.stderr(safeBlock(`webhook-inbox: ${message}`));
    return code;
  };
  if (argv[0] === '--version' || argv[0] === '-V') {
    io.stdout(packageVersion());
    return EXIT.ok;
  }
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    io.stdout(topHelp(COMMANDS));
    return argv.length === 0 ? EXIT.usage : EXIT.ok;
  }
  const group = GROUPS.has(argv[0]) ? argv[0] : undefined;
  const name = group ? `${group} ${argv[1] ?? ''}`.trim() : argv[0];
  const command = COMMANDS[name];
  if (!command) {
    if (group && (argv[1] === undefined || argv[1] === '--help' || argv[1] === '-h')) {
      io.stdout(groupHelp(COMMANDS, group));
      return argv[1] === undefined ? EXIT.usage : EXIT.ok;
    }
    const typed = argv.slice(0, group ? 2 : 1).join(' ');
    const near = nearestCommand(group, group ? (argv[1] ?? '') : argv[0]);
    return fail(
      EXIT.usage,
      'usage',
      `unknown command ${JSON.stringify(typed)}; ${near ? `did you mean \`webhook-inbox ${near}\`?` : 'run `webhook-inbox --help`'}`,
    );
  }

  let opened: OpenedOperations | undefined;
  let schema = 'webhook_inbox';
  try {
    const { values, positionals } = parse(command, argv.slice(name.split(' ').length));
    if (values.help) {
      io.stdout(commandHelp(name, command));
      return EXIT.ok;
    }
    checkPositionals(name, command, positionals);
    const where = connectionOptions(values, env, name);
    schema = where.schema ?? schema;
    command.check?.({ values, positionals, io, env });
    const connection: Connection = {
      async ops() {
        opened ??= await openOperations(where);
        return opened;
      },
    };
    const out: Out = {
      json,
      result: (value, text) => io.stdout(json ? safeJson(value) : safeBlock(text(value))),
    };
    return await command.run({ values, positionals, env, out, io, connection });
  } catch (err) {
    if (err instanceof UsageError)
      return fail(EXIT.usage, 'usage', `${err.message}\nusage: ${command.usage}`);
    if (err instanceof RefusedError) return fail(EXIT.refused, err.code, err.message, err.details);
    if (err instanceof OperationError) {
      const code =
        err.code === 'not-found' ? EXIT.notFound : err.code === 'ambiguous' ? EXIT.usage : EXIT.refused;
      return fail(code, err.code, err.message);
    }
    return fail(EXIT.failure, 'failure', describeFailure(err, schema));
  } finally {
    await opened?.close().catch(() => {});
  }
}
