/** What a command is, what it is given, and the exit codes it answers with. */
import type { openOperations } from '../operations/index.js';

/** Exit codes a script can rely on (help.ts says what each means). */
export const EXIT = Object.freeze({ ok: 0, failure: 1, usage: 2, notFound: 3, refused: 4 } as const);

/** A bad command line: exit 2, nothing changed. */
export class UsageError extends Error {}

/** Nothing was changed: the operator must confirm or look first (exit 4). `details` go into the JSON error. */
export class RefusedError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

export type OptionSpec = { type: 'string' | 'boolean'; short?: string; help: string };
export type Values = Record<string, string | boolean | undefined>;

/** The process's streams and terminal, passed in so that `main` can be driven from a test. */
export interface CliIo {
  /** A line (a newline is added). */
  stdout(text: string): void;
  stderr(text: string): void;
  /** Bytes on stdout exactly as they are (`dead show --raw`). */
  raw(bytes: Uint8Array): void;
  /** A yes/no question on the terminal; undefined when stdin is not a TTY (a flag must say it). */
  confirm?: (question: string) => Promise<boolean>;
  /** A long-running command (`console`) runs until this settles. @defaultValue SIGINT or SIGTERM */
  untilStopped?: () => Promise<void>;
}

/** Output for one command: `value` as JSON with --json, else `text()` of it, safe on a terminal. */
export interface Out {
  readonly json: boolean;
  result<T>(value: T, text: (value: T) => string): void;
}

export type OpenedOperations = Awaited<ReturnType<typeof openOperations>>;

/** The database, opened on first use (help and usage errors never connect). */
export interface Connection {
  ops(): Promise<OpenedOperations>;
}

export interface CommandArgs {
  values: Values;
  /** A secret such as the console's token is read from here, not from argv. */
  env: Record<string, string | undefined>;
  positionals: string[];
  out: Out;
  io: CliIo;
  connection: Connection;
}

export interface Command {
  readonly summary: string;
  readonly usage: string;
  readonly help?: string;
  readonly options?: Record<string, OptionSpec>;
  readonly positionals: readonly [min: number, max: number];
  /** Checks done before the database is opened. */
  check?(args: {
    values: Values;
    positionals: string[];
    io: CliIo;
    env: Record<string, string | undefined>;
  }): void;
  run(args: CommandArgs): Promise<number>;
}

/** `3 dead letters`, `1 dead letter`. */
export function deadLetters(n: number): string {
  return `${n} dead letter${n === 1 ? '' : 's'}`;
}

/** Asks before a bulk action (unless --yes, or nothing matches); a no changes nothing (exit 4). */
export async function confirmOrRefuse(
  values: Values,
  io: CliIo,
  count: number,
  question: string,
): Promise<void> {
  if (values.yes || count === 0) return;
  if (!(await io.confirm!(`${question} [y/N] `)))
    throw new RefusedError('not-confirmed', 'not confirmed; nothing was changed');
}

/** A bulk action that would ask, with no terminal to ask on: a usage error naming the flags. */
export function checkConfirmable(values: Values, io: CliIo, what: string, dryRun: string): void {
  if (!values['dry-run'] && !values.yes && !io.confirm) {
    throw new UsageError(
      `${what}, and there is no terminal to ask on: pass --yes to confirm (or --dry-run to ${dryRun})`,
    );
  }
}
