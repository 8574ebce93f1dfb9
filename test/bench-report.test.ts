import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Cell, longGoal, summarize } from '../bench/report.js';

/** One measured cell, as bench/run.ts records it. */
function cell(
  run: number,
  contender: string,
  rps: number,
  load: [number, number],
  extra: Partial<Cell> = {},
): Cell {
  return {
    run,
    workload: 'unique',
    contender,
    rps,
    p50: 10,
    p99: 20,
    total: rps * 4,
    non2xx: 0,
    errors: 0,
    cpuUs: 500,
    pgUs: 400,
    applied: rps * 4,
    distinct: rps * 4,
    doubleApplied: 0,
    outOfOrder: 0,
    held: 0,
    dead: 0,
    drainMs: [],
    loadBefore: load[0],
    loadAfter: load[1],
    ...extra,
  };
}

const goal = (goals: ReturnType<typeof summarize>['goals'], name: string) =>
  goals.find((g) => g.goal === name);

describe('bench report: the load rule', () => {
  it('leaves a cell whose load passed 1.5 at either end out of every median and ratio', () => {
    const { rows, goals } = summarize([
      cell(1, 'bare', 2000, [0.4, 0.9]),
      cell(1, 'inbox', 1500, [0.4, 1.0]),
      cell(2, 'bare', 2000, [0.4, 0.9]),
      // Busy at its end: 1900 req/s would lift the median ratio to 0.85.
      cell(2, 'inbox', 1900, [0.4, 1.6]),
      cell(3, 'bare', 2000, [1.7, 1.2]),
      cell(3, 'inbox', 1900, [0.4, 1.0]),
    ]);
    const inbox = rows.find((r) => r.contender === 'inbox');
    expect(inbox?.runs).toBe(2);
    expect(inbox?.rps).toBe(1700);
    // Run 2's inbox and run 3's bare are out: only run 1 has both, and its ratio is 0.75.
    expect(goal(goals, 'unique deliveries: inbox vs bare')?.measured).toBe('0.75×');
    expect(goal(goals, 'unique deliveries: inbox vs bare')?.met).toBe(false);
  });

  it('counts an event applied twice in a discarded cell', () => {
    const { goals } = summarize([
      cell(1, 'bare', 2000, [0.4, 0.9]),
      cell(1, 'inbox', 1500, [0.4, 2.1], { doubleApplied: 1 }),
    ]);
    const correctness = goal(goals, 'webhook-inbox: events applied twice or out of order, all cells');
    expect(correctness?.measured).toBe('1');
    expect(correctness?.correctnessViolation).toBe(true);
  });
});

describe('the RSS goal of `npm run bench -- --long`', () => {
  const dir = mkdtempSync(join(tmpdir(), 'long-'));
  const run = (over: Record<string, unknown>) => {
    const file = join(dir, `${Math.random()}.json`);
    const quiet = {
      deliveries: 1_000_000,
      failed: 0,
      rssBeforeMb: 140,
      rssAfterMb: 150,
      growthMb: 10,
      perMillionMb: 10,
      extrapolated: false,
      samples: [{ deliveries: 1_000_000, rssMb: 151, load: 0.8 }],
      seconds: 4000,
      pausedSeconds: 1500,
      loadAtStart: 0.4,
      loadAtEnd: 0.7,
      loadMax: 1.2,
    };
    writeFileSync(file, JSON.stringify({ ...quiet, ...over }));
    return longGoal(file);
  };

  it('shows a run whose every 5-second sample stayed under 1.5, with its pauses', () => {
    const g = run({});
    expect(g.met).toBe(true);
    expect(g.measured).toContain('10.0 MB (140 → 150 MB over 1000000 deliveries');
    expect(g.measured).toContain('1500 s paused');
  });

  it('hides a run one of whose samples passed 1.5, though both its ends were quiet', () => {
    const g = run({ loadMax: 1.54 });
    expect(g.met).toBeNull();
    expect(g.measured).toMatch(/^not shown/);
    expect(g.measured).not.toContain('MB');
  });

  it('does not meet the goal when deliveries failed, and says how many', () => {
    const g = run({ failed: 3 });
    expect(g.met).toBe(false);
    expect(g.measured).toContain('3 deliveries answered other than 2xx or failed');
  });

  it('asks for a run when there is none', () => {
    expect(longGoal(join(dir, 'absent.json')).measured).toBe('run `npm run bench -- --long N`');
  });
});
