/**
 * The demo's live line (examples/live-line.ts): on a terminal it fits the terminal's width, so
 * rewriting it in place leaves no stale rows; off a terminal it is a plain line per second.
 */
import { describe, expect, test } from 'vitest';
import { fitToWidth, liveLine } from '../examples/live-line.js';

const LINE =
  '██████████·········· 50% 3.2s │ sent 1210 · acked 1000 · retries 210 · duplicates absorbed 31 · held 4 · dead letters 0 · faults 96 · breaker closed';

describe('fitToWidth', () => {
  test.each([20, 40, 80, 120])(
    'cut to %i columns: one row, the last column free, marked with …',
    (columns) => {
      const fitted = fitToWidth(LINE, columns);
      expect([...fitted].length).toBe(columns - 1);
      expect(fitted.endsWith('…')).toBe(true);
      expect(LINE.startsWith(fitted.slice(0, -1))).toBe(true);
    },
  );

  test('a line that fits, or no known width, is left as it is', () => {
    expect(fitToWidth('short', 80)).toBe('short');
    expect(fitToWidth(LINE, undefined)).toBe(LINE);
  });
});

describe('liveLine', () => {
  test('on a terminal: each tick rewrites the row, at the width the terminal has now', () => {
    const written: string[] = [];
    const out = { isTTY: true, columns: 40, write: (t: string) => written.push(t) };
    const live = liveLine(out);
    live.tick(LINE);
    out.columns = 60; // resized
    live.tick(LINE);
    live.clear();
    expect(written.map((w) => [...w.replace('\r\x1b[K', '')].length)).toEqual([39, 59, 0]);
    expect(written.every((w) => w.startsWith('\r\x1b[K') && !w.includes('\n'))).toBe(true);
  });

  test('not a terminal: whole plain lines, at most one per second, no control characters', () => {
    const written: string[] = [];
    let clock = 0;
    const live = liveLine({ isTTY: false, write: (t: string) => written.push(t) }, 1000, () => clock);
    for (clock = 0; clock <= 3000; clock += 250) live.tick(`t=${clock}`);
    live.clear();
    expect(written).toEqual(['t=0\n', 't=1000\n', 't=2000\n', 't=3000\n']);
  });
});
