/**
 * The demo's live progress line. On a terminal it is rewritten in place, so it must fit on one
 * row: a line wider than the terminal wraps, and `\r` then rewrites only its last row, leaving
 * a trail of stale rows. Off a terminal (CI logs, a pipe), plain lines, one per interval.
 */

/**
 * `text` cut to `columns - 1` characters (the last column is left free: writing into it makes
 * some terminals wrap), with `…` where it was cut. Counts code points: every character the demo
 * prints is one column wide. Without a width (not a terminal), the text as it is.
 */
export function fitToWidth(text: string, columns: number | undefined): string {
  if (!columns || columns < 2) return text;
  const chars = [...text];
  const room = columns - 1;
  if (chars.length <= room) return text;
  return `${chars.slice(0, room - 1).join('')}…`;
}

/** How the line is written: rewritten in place on a terminal, a plain line per interval elsewhere. */
export interface LiveLineOutput {
  readonly isTTY?: boolean;
  readonly columns?: number;
  write(text: string): unknown;
}

/**
 * Returns `tick(text)`: call it as often as you like. On a terminal each call rewrites the row
 * (read `columns` at every call: the terminal may have been resized); elsewhere at most one
 * line per `plainEveryMs`.
 */
export function liveLine(
  out: LiveLineOutput,
  plainEveryMs = 1000,
  now: () => number = () => performance.now(),
): { tick(text: string): void; clear(): void } {
  let lastPlain = Number.NEGATIVE_INFINITY;
  return {
    tick(text) {
      if (out.isTTY) out.write(`\r\x1b[K${fitToWidth(text, out.columns)}`);
      else if (now() - lastPlain >= plainEveryMs) {
        lastPlain = now();
        out.write(`${text}\n`);
      }
    },
    clear() {
      if (out.isTTY) out.write('\r\x1b[K');
    },
  };
}
