import { GLOBAL_OPTIONS } from './arguments.js';
import type { Command, OptionSpec } from './command.js';

function optionHelp(options: Record<string, OptionSpec>): string {
  return Object.entries(options)
    .map(([name, o]) => {
      const flag = `${o.short ? `-${o.short}, ` : '    '}--${name}${o.type === 'string' ? ' <value>' : ''}`;
      return `  ${flag.padEnd(28)} ${o.help}`;
    })
    .join('\n');
}

const EXIT_HELP = `Exit codes:
  0  done
  1  operational failure (database unreachable, tables missing, a statement failed)
  2  usage error (nothing was changed)
  3  not found (no such id or key)
  4  refused: it exists, but the action does not apply in its state, or it needs --force or a
     confirmation (nothing was changed)`;

const EVERY_COMMAND = ['Options (every command):', optionHelp(GLOBAL_OPTIONS), '', EXIT_HELP];

export function topHelp(commands: Record<string, Command>): string {
  const width = Math.max(...Object.keys(commands).map((c) => c.length));
  return [
    'webhook-inbox: operate a webhook inbox (dead letters, ignored events, blocked keys, retention).',
    '',
    'Usage: webhook-inbox <command> [arguments] [options]',
    '       webhook-inbox --version',
    '',
    'Commands:',
    ...Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`),
    '',
    ...EVERY_COMMAND,
    '',
    'Run `webhook-inbox <command> --help` for a command.',
  ].join('\n');
}

export function commandHelp(name: string, c: Command): string {
  return [
    `webhook-inbox ${name}: ${c.summary}`,
    '',
    `Usage: ${c.usage}`,
    ...(c.help ? ['', c.help] : []),
    ...(c.options ? ['', 'Options:', optionHelp(c.options)] : []),
    '',
    ...EVERY_COMMAND,
  ].join('\n');
}

export function groupHelp(commands: Record<string, Command>, group: string): string {
  return Object.entries(commands)
    .filter(([n]) => n.startsWith(`${group} `))
    .map(([n, c]) => `webhook-inbox ${n.padEnd(14)} ${c.summary}`)
    .join('\n');
}
