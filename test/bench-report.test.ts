import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Cell, goals as goalsOf, loadSentence, longGoal, rows as rowsOf } from '../bench/report.js';
import { DEFAULT } from '../bench/workloads.js';

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

const goal = (goals: ReturnType<typeof goalsOf>, name: string) => goals.find((g) => g.goal === name);

describe('bench report: the load is printed, never a filter', () => {
  const cells = [
    cell(1, 'bare', 2000, [0.4, 0.9]),
    cell(1, 'inbox', 1500, [0.4, 1.0]),
    cell(2, 'bare', 2000, [0.4, 0.9]),
    cell(2, 'inbox', 1900, [0.4, 1.6]),
    cell(3, 'bare', 2000, [1.7, 1.2]),
    cell(3, 'inbox', 1900, [0.4, 1.0]),
  ];

  it('counts every cell in the medians and the ratios, whatever its load', () => {
    const inbox = rowsOf(cells).find((r) => r.contender === 'inbox');
    expect(inbox?.runs).toBe(3);
    expect(inbox?.rps).toBe(1900);
    // Per run 0.75, 0.95 and 0.95, each from two cells of that run: a busy cell (run 2's inbox,
    // run 3's bare) counts as its neighbours do.
    expect(goal(goalsOf(cells), 'unique deliveries: inbox vs bare')?.measured).toBe('0.95×');
    expect(goal(goalsOf(cells), 'unique deliveries: inbox vs bare')?.met).toBe(true);
  });

  it('says the load of the run and of its cells, and leaves nothing out', () => {
    const sentence = loadSentence(cells, { loadAtStart: 0.3, loadAtEnd: 1.4 });
    expect(sentence).toContain('0.30 when the run started, 1.40 at its end');
    expect(sentence).toContain('0.40–1.70 before its cells, 0.90–1.60 after them');
    expect(sentence).not.toMatch(/discard|left out/);
  });

  it('counts an event applied twice, in a cell of any load', () => {
    const goals = goalsOf([
      cell(1, 'bare', 2000, [0.4, 0.9]),
      cell(1, 'inbox', 1500, [0.4, 2.1], { doubleApplied: 1 }),
    ]);
    const correctness = goal(goals, 'webhook-inbox: events applied twice or out of order, all cells');
    expect(correctness?.measured).toBe('1');
    expect(correctness?.correctnessViolation).toBe(true);
  });
});

describe('the default cells of `npm run bench`', () => {
  const cells = Object.entries(DEFAULT).flatMap(([workload, contenders]) =>
    contenders.map((contender) =>
      cell(1, contender, 1000, [0.5, 0.5], {
        workload,
        drainMs: workload === 'shuffled' && contender === 'inbox' ? [5] : [],
      }),
    ),
  );

  it('fill every goal row and every ratio column', () => {
    const unmeasured = goalsOf(cells).filter((g) => /not measured/.test(g.measured));
    expect(unmeasured.map((g) => g.goal)).toEqual([]);
    const noRatio = rowsOf(cells).filter((r) => !Number.isFinite(r.ratio));
    expect(noRatio.map((r) => `${r.workload}/${r.contender}`)).toEqual([]);
  });
});

describe('the RSS goal of `npm run bench -- --long`', () => {
  const dir = mkdtempSync(join(tmpdir(), 'long-'));
  const run = (over: Record<string, unknown>) => {
    const file = join(dir, `${Math.random()}.json`);
    const measured = {
      deliveries: 1_000_000,
      failed: 0,
      rssBeforeMb: 140,
      rssAfterMb: 150,
      growthMb: 10,
      perMillionMb: 10,
      extrapolated: false,
      samples: [
        { deliveries: 500_000, rssMb: 151, load: 0.8 },
        { deliveries: 1_000_000, rssMb: 149, load: 1.2 },
      ],
      seconds: 2000,
      loadAtStart: 0.4,
      loadAtEnd: 0.7,
    };
    writeFileSync(file, JSON.stringify({ ...measured, ...over }));
    return longGoal(file);
  };

  it('shows the figure with the loads of its run beside it', () => {
    const g = run({});
    expect(g.met).toBe(true);
    expect(g.measured).toContain('10.0 MB (140 → 150 MB over 1000000 deliveries in 2000 s');
    expect(g.measured).toContain('at most 151 MB at its steps');
    expect(g.measured).toContain('load 0.40 before, 0.70 after, at most 1.20 at its steps');
  });

  it('shows the figure of a busy run too: the load is said, not a reason to hide it', () => {
    const g = run({ loadAtEnd: 2.5, samples: [{ deliveries: 1_000_000, rssMb: 151, load: 3.1 }] });
    expect(g.met).toBe(true);
    expect(g.measured).toContain('10.0 MB');
    expect(g.measured).toContain('2.50 after, at most 3.10 at its steps');
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
