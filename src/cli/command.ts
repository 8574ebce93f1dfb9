/** What a command is, what it is given, and the exit codes it answers with. */
import type { openOperations } from '../operations/index.js';

/** Exit codes a script can rely on. */
export const EXIT = Object.freeze({
  ok: 0,
  /** The database could not be reached, the tables are missing, a statement failed. */
  failure: 1,
  /** Bad command line; nothing was changed. */
  usage: 2,
  /** The id or key does not exist. */
  notFound: 3,
  /** It exists, but the action does not apply in its state (nothing was changed). */
  refused: 4,
} as const);

/** A bad command line: exit 2, nothing changed. */
export class UsageError extends Error {}

/**
 * Nothing was changed because the operator must confirm or look first (exit 4). `details`
 * goes into the JSON error for scripts.
 */
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
  /** A line on stdout (a newline is added). */
  stdout(text: string): void;
  /** A line on stderr (a newline is added). */
  stderr(text: string): void;
  /** Bytes on stdout exactly as they are (`dead show --raw`). */
  raw(bytes: Uint8Array): void;
  /**
   * Asks a yes/no question on the operator's terminal; undefined when there is no terminal to
   * ask on (stdin is not a TTY), so the caller must be told with a flag instead.
   */
  confirm?: (question: string) => Promise<boolean>;
  /** A long-running command (`console`) runs until this settles. @defaultValue SIGINT or SIGTERM */
  untilStopped?: () => Promise<void>;
}

/** Output for one command: JSON for scripts, or text that is safe on a terminal. */
export interface Out {
  readonly json: boolean;
  /** Prints `value` as JSON with --json, else `text()` of it. */
  result<T>(value: T, text: (value: T) => string): void;
}

export type OpenedOperations = Awaited<ReturnType<typeof openOperations>>;

/** The database, opened on first use (help and usage errors never connect). */
export interface Connection {
  ops(): Promise<OpenedOperations>;
}

export interface CommandArgs {
  values: Values;
  /** The environment (a secret such as the console's token is read from it, not from argv). */
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
  /** Allowed number of positional arguments. */
  readonly positionals: readonly [min: number, max: number];
  /** Checks done before the database is opened (the connection options are checked by then too). */
  check?(args: {
    values: Values;
    positionals: string[];
    io: CliIo;
    env: Record<string, string | undefined>;
  }): void;
  run(args: CommandArgs): Promise<number>;
}
