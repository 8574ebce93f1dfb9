/**
 * The lanes that take unordered batches at once: all of them while an event's time holds, fewer
 * when it grows with the lanes (handlers waiting on one another's row locks), all again after.
 */
import { describe, expect, it } from 'vitest';
import { LaneLimit } from '../src/background/lane-limit.js';

/** Batches of 10 events, the i-th `perEventMs(lanes, i)` an event with the limit's lanes taking at once. */
function run(limit: LaneLimit, batches: number, perEventMs: (lanes: number, i: number) => number): number[] {
  const seen: number[] = [];
  for (let i = 0; i < batches; i++) {
    limit.observe(10 * perEventMs(limit.lanes, i), 10);
    seen.push(limit.lanes);
  }
  return seen;
}

describe('the lane limit', () => {
  it('keeps every lane while an event takes as long however many lanes take (a handler waiting on I/O)', () => {
    const limit = new LaneLimit(10);
    expect(run(limit, 200, () => 300)).toEqual(new Array(200).fill(10));
  });

  it('shrinks to a few lanes when the lanes wait on one another, and grows back once they do not', () => {
    const limit = new LaneLimit(8);
    // One row every handler writes: the lanes queue for its lock, a batch waiting for those ahead of it.
    const contended = run(limit, 200, (lanes, i) => 1 + (i % lanes));
    expect(contended[0]).toBe(8);
    expect(Math.max(...contended.slice(100))).toBeLessThanOrEqual(4);
    // The handlers now write rows of their own: the time holds, and the limit climbs back.
    const apart = run(limit, 400, () => 1);
    expect(apart.at(-1)).toBe(8);
  });

  it('never goes below one lane, nor counts a take that found nothing', () => {
    const limit = new LaneLimit(4);
    limit.observe(5, 0);
    expect(limit.lanes).toBe(4);
    run(limit, 500, (lanes, i) => 1000 * (1 + (i % lanes)));
    expect(limit.lanes).toBeGreaterThanOrEqual(1);
  });
});
