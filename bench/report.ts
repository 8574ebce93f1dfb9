/**
 * Turns the measured cells into the terminal table, bench/results/latest.json, the SVG chart
 * and the generated part of BENCHMARKS.md (between its `bench:begin`/`bench:end` markers; the
 * prose around them is kept).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CONTENDERS } from './contenders.js';
import { WORKLOADS } from './workloads.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');

export interface Cell {
  run: number;
  workload: string;
  contender: string;
  rps: number;
  p50: number;
  p99: number;
  total: number;
  non2xx: number;
  errors: number;
  /** The server process's CPU (user + system) per request, in µs. */
  cpuUs: number;
  /** PostgreSQL's CPU (every backend) per request, in µs. */
  pgUs: number;
  applied: number;
  distinct: number;
  doubleApplied: number;
  outOfOrder: number;
  held: number;
  dead: number;
  drainMs: number[];
  /**
   * One-minute load average just before the cell's server started, and at the cell's end:
   * printed beside the figures, never a reason to leave a cell out (run.ts says why).
   */
  loadBefore: number;
  loadAfter: number;
}

export interface Goal {
  goal: string;
  target: string;
  measured: string;
  met: boolean | null;
  correctnessViolation?: boolean;
}

export interface ReportOptions {
  command: string;
  runs: number;
  duration: number;
  warmup: number;
  connections: number;
  poolSize: number;
  pinned: boolean;
  postgresUrl: string;
  elapsedS: number;
  writeMarkdown: boolean;
  /** App instances per cell (`--instances`), and the file under bench/results the run is written to. */
  instances: number;
  resultsFile: string;
  /** One-minute load average when the run started and at its end (each cell keeps its own). */
  loadAtStart: number;
  loadAtEnd: number;
}

export function median(xs: number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

/** The reference each workload's ratio column is taken against (same run, same workload unless said). */
const REFERENCE: Record<string, [workload: string, contender: string]> = {
  unique: ['unique', 'bare'],
  dup50: ['dup50', 'inbox'],
  replay: ['replay', 'hello'],
  storm: ['storm', 'inbox'],
  ordered: ['unique', 'inbox'],
  shuffled: ['ordered', 'inbox'],
};

export interface Row {
  workload: string;
  contender: string;
  rps: number;
  p50: number;
  p99: number;
  ratio: number;
  ratioOf: string;
  non2xx: number;
  errors: number;
  doubleApplied: number;
  outOfOrder: number;
  held: number;
  dead: number;
  runs: number;
  /** Median server CPU per request, µs. */
  cpuUs: number;
  /** Median PostgreSQL CPU per request, µs. */
  pgUs: number;
}

/** Median over runs of (a / b), each pair taken from the same run. */
function ratio(cells: Cell[], a: [string, string], b: [string, string] | [string, string][]): number {
  const bs = (Array.isArray(b[0]) ? b : [b]) as [string, string][];
  const perRun: number[] = [];
  for (const run of new Set(cells.map((c) => c.run))) {
    const x = cells.find((c) => c.run === run && c.workload === a[0] && c.contender === a[1]);
    const ys = bs
      .map(([w, k]) => cells.find((c) => c.run === run && c.workload === w && c.contender === k))
      .filter((c): c is Cell => !!c);
    if (!x || ys.length === 0) continue;
    perRun.push(x.rps / Math.max(...ys.map((y) => y.rps)));
  }
  return median(perRun);
}

export function rows(cells: Cell[]): Row[] {
  const out: Row[] = [];
  const seen = new Set<string>();
  for (const c of cells) {
    const id = `${c.workload}/${c.contender}`;
    if (seen.has(id)) continue;
    seen.add(id);
    const mine = cells.filter((x) => x.workload === c.workload && x.contender === c.contender);
    const ref = REFERENCE[c.workload];
    out.push({
      workload: c.workload,
      contender: c.contender,
      rps: median(mine.map((x) => x.rps)),
      p50: median(mine.map((x) => x.p50)),
      p99: median(mine.map((x) => x.p99)),
      ratio: ref ? ratio(cells, [c.workload, c.contender], ref) : Number.NaN,
      ratioOf: ref ? `${ref[1]}${ref[0] === c.workload ? '' : ` (${ref[0]})`}` : '',
      non2xx: mine.reduce((s, x) => s + x.non2xx, 0),
      errors: mine.reduce((s, x) => s + x.errors, 0),
      doubleApplied: mine.reduce((s, x) => s + x.doubleApplied, 0),
      outOfOrder: mine.reduce((s, x) => s + x.outOfOrder, 0),
      held: mine.reduce((s, x) => s + x.held, 0),
      dead: mine.reduce((s, x) => s + x.dead, 0),
      runs: mine.length,
      cpuUs: median(mine.map((x) => x.cpuUs ?? Number.NaN)),
      pgUs: median(mine.map((x) => x.pgUs ?? Number.NaN)),
    });
  }
  return out;
}

function fmt(n: number, digits = 0): string {
  return Number.isFinite(n) ? n.toFixed(digits) : '–';
}

/** The goals of a run, every cell counted. */
export function goals(cells: Cell[]): Goal[] {
  const has = (w: string, c: string) => cells.some((x) => x.workload === w && x.contender === c);
  const out: Goal[] = [];
  const check = (
    goal: string,
    target: number,
    a: [string, string],
    b: [string, string] | [string, string][],
  ) => {
    const bs = (Array.isArray(b[0]) ? b : [b]) as [string, string][];
    if (!has(...a) || !bs.some((x) => has(...x))) {
      out.push({ goal, target: `≥ ${target}×`, measured: 'not measured', met: null });
      return;
    }
    const r = ratio(cells, a, b);
    out.push({ goal, target: `≥ ${target}×`, measured: `${fmt(r, 2)}×`, met: r >= target });
  };
  // Ratios within one run, medians over runs.
  check('unique deliveries: inbox vs bare', 0.9, ['unique', 'inbox'], ['unique', 'bare']);
  check(
    'unique deliveries: inbox vs the fastest peer',
    0.95,
    ['unique', 'inbox'],
    [
      ['unique', 'node-idempotency'],
      ['unique', 'express-idempotency'],
    ],
  );
  check(
    'deferred acknowledgements: inbox-deferred vs hello',
    0.5,
    ['unique', 'inbox-deferred'],
    ['unique', 'hello'],
  );
  // Not a goal of the issue: how far the inbox is from the smallest correct inbox one would
  // write by hand (the dedup row in the handler's transaction, nothing else).
  if (has('unique', 'inbox') && has('unique', 'handmade')) {
    const r = ratio(cells, ['unique', 'inbox'], ['unique', 'handmade']);
    out.push({
      goal: 'unique deliveries: inbox vs handmade (reference, not a goal)',
      target: '–',
      measured: `${fmt(r, 2)}×`,
      met: null,
    });
  }
  check('unique deliveries: inbox-redis vs bare', 0.88, ['unique', 'inbox-redis'], ['unique', 'bare']);
  check(
    'unique deliveries on PGlite: inbox-pglite vs bare-pglite',
    0.8,
    ['unique', 'inbox-pglite'],
    ['unique', 'bare-pglite'],
  );
  const pglite = cells.filter((c) => c.workload === 'unique' && c.contender === 'inbox-pglite');
  if (pglite.length) {
    const spread = median(pglite.map((c) => c.p99 / Math.max(c.p50, 0.001)));
    out.push({
      goal: 'inbox-pglite latency: p99 vs p50',
      target: '≤ 10×',
      measured: `${fmt(spread, 1)}×`,
      met: spread <= 10,
    });
  }
  check(
    'duplicates, as shipped (in-process cache): inbox vs hello (replay)',
    0.95,
    ['replay', 'inbox'],
    ['replay', 'hello'],
  );
  check(
    'duplicates without Redis, in-process cache off: inbox-pg vs hello (replay)',
    0.75,
    ['replay', 'inbox-pg'],
    ['replay', 'hello'],
  );
  check(
    'duplicates with Redis: inbox-redis vs hello (replay)',
    0.9,
    ['replay', 'inbox-redis'],
    ['replay', 'hello'],
  );
  check('ordered over 1000 keys vs unordered (inbox)', 0.8, ['ordered', 'inbox'], ['unique', 'inbox']);
  const drains = cells
    .filter((c) => c.contender === 'inbox' && c.workload === 'shuffled')
    .flatMap((c) => c.drainMs);
  out.push(
    drains.length
      ? {
          goal: `drain latency p99 (${drains.length} held events drained)`,
          target: '≤ 20 ms',
          measured: `${fmt(percentile(drains, 99), 1)} ms (p50 ${fmt(percentile(drains, 50), 1)} ms)`,
          met: percentile(drains, 99) <= 20,
        }
      : { goal: 'drain latency p99', target: '≤ 20 ms', measured: 'not measured', met: null },
  );
  out.push(longGoal());
  const broken = cells.filter(
    (c) => c.contender.startsWith('inbox') && (c.doubleApplied > 0 || c.outOfOrder > 0),
  );
  out.push({
    goal: 'webhook-inbox: events applied twice or out of order, all cells',
    target: '0',
    measured: String(broken.reduce((s, c) => s + c.doubleApplied + c.outOfOrder, 0)),
    met: broken.length === 0,
    correctnessViolation: broken.length > 0,
  });
  return out;
}

function machine(postgresUrl: string) {
  let postgres = 'unknown';
  let redis = 'unknown';
  try {
    postgres = execFileSync('psql', [postgresUrl, '-tAc', 'show server_version']).toString().trim();
  } catch {}
  try {
    redis =
      /redis_version:(\S+)/.exec(execFileSync('redis-cli', ['info', 'server']).toString())?.[1] ?? 'unknown';
  } catch {}
  return {
    nproc: cpus().length,
    cpu: cpus()[0]?.model ?? 'unknown',
    memoryGb: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    postgres,
    redis,
  };
}

function table(header: string[], body: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((r) => r[i].length)));
  const line = (r: string[]) =>
    r.map((c, i) => (i < 2 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}

function markdownTable(header: string[], body: string[][]): string {
  return [
    `| ${header.join(' | ')} |`,
    `|${header.map((_, i) => (i < 2 ? '---' : '---:')).join('|')}|`,
    ...body.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

const HEADER = [
  'workload',
  'contender',
  'req/s',
  'ratio',
  'vs',
  'p50 ms',
  'p99 ms',
  'server µs/req',
  'pg µs/req',
  'non-2xx',
  'double-applied',
  'out-of-order',
  'held',
];

function rowCells(r: Row): string[] {
  return [
    r.workload,
    r.contender,
    fmt(r.rps),
    fmt(r.ratio, 2),
    r.ratioOf,
    fmt(r.p50, 1),
    fmt(r.p99, 1),
    fmt(r.cpuUs),
    fmt(r.pgUs),
    String(r.non2xx),
    String(r.doubleApplied),
    String(r.outOfOrder),
    String(r.held),
  ];
}

function colour(contender: string): string {
  if (contender.startsWith('inbox')) return '#2e7d32';
  if (contender === 'naive') return '#c62828';
  if (contender === 'hello' || contender === 'bare') return '#757575';
  return '#ef6c00';
}

/** The RSS goal, from bench/results/long.json (written by `npm run bench -- --long N`). */
export function longGoal(longFile = join(here, 'results', 'long.json')): Goal {
  if (!existsSync(longFile))
    return {
      goal: 'RSS growth over 10^6 deliveries',
      target: '< 50 MB',
      measured: 'run `npm run bench -- --long N`',
      met: null,
    };
  const l = JSON.parse(readFileSync(longFile, 'utf8'));
  const steps: Array<{ rssMb: number; load: number }> = l.samples;
  const failed = l.failed > 0 ? `; ${l.failed} deliveries answered other than 2xx or failed` : '';
  return {
    goal: `RSS growth over 10^6 deliveries${l.extrapolated ? ` (measured over ${l.deliveries}, extrapolated linearly)` : ''}`,
    target: '< 50 MB',
    measured: `${fmt(l.perMillionMb, 1)} MB (${fmt(l.rssBeforeMb, 0)} → ${fmt(l.rssAfterMb, 0)} MB over ${l.deliveries} deliveries in ${l.seconds} s, at most ${fmt(Math.max(...steps.map((x) => x.rssMb)), 0)} MB at its steps; load ${fmt(l.loadAtStart, 2)} before, ${fmt(l.loadAtEnd, 2)} after, at most ${fmt(Math.max(...steps.map((x) => x.load)), 2)} at its steps${failed})`,
    met: l.perMillionMb < 50 && !(l.failed > 0),
  };
}

/**
 * After a `--long` run: its RSS row replaces the one in BENCHMARKS.md's generated goal table and
 * in latest.json, leaving the cells of the last run as they were.
 */
export function writeLongGoal(): Goal {
  const g = longGoal();
  const latestFile = join(here, 'results', 'latest.json');
  if (existsSync(latestFile)) {
    const latest = JSON.parse(readFileSync(latestFile, 'utf8'));
    latest.goals = latest.goals.map((x: Goal) => (x.goal.startsWith('RSS growth') ? g : x));
    writeFileSync(latestFile, `${JSON.stringify(latest, null, 2)}\n`);
  }
  const file = join(root, 'BENCHMARKS.md');
  if (existsSync(file)) {
    const row = `| ${goalCells(g, '**no**').join(' | ')} |`;
    const md = readFileSync(file, 'utf8').replace(/^\| RSS growth over 10\^6 deliveries.*$/m, () => row);
    writeFileSync(file, md);
  }
  return g;
}

function goalCells(g: Goal, no: string): string[] {
  return [g.goal, g.target, g.measured, g.met === null ? '–' : g.met ? 'yes' : no];
}

/** Horizontal bars, one group per workload, each group on its own scale (req/s printed). */
export function chart(rs: Row[]): string {
  const workloads = [...new Set(rs.map((r) => r.workload))];
  const barH = 16;
  const gap = 4;
  const labelW = 170;
  const plotW = 420;
  const width = labelW + plotW + 220;
  let y = 40;
  const parts: string[] = [];
  for (const w of workloads) {
    const group = rs.filter((r) => r.workload === w);
    const max = Math.max(...group.map((r) => r.rps));
    parts.push(`<text x="10" y="${y + 12}" font-weight="bold">${w}</text>`);
    parts.push(
      `<text x="${labelW}" y="${y + 12}" fill="#555">${escapeXml(WORKLOADS[w]?.description ?? '')}</text>`,
    );
    y += 20;
    for (const r of group) {
      const len = Math.max(1, (r.rps / max) * plotW);
      const bad = r.doubleApplied + r.outOfOrder;
      parts.push(`<text x="${labelW - 8}" y="${y + 12}" text-anchor="end">${r.contender}</text>`);
      parts.push(
        `<rect x="${labelW}" y="${y}" width="${len.toFixed(1)}" height="${barH}" fill="${colour(r.contender)}"/>`,
      );
      const note = `${fmt(r.rps)} req/s${bad ? ` — ${r.doubleApplied} double-applied, ${r.outOfOrder} out of order` : ''}${r.non2xx ? ` (${r.non2xx} non-2xx)` : ''}`;
      parts.push(
        `<text x="${labelW + len + 6}" y="${y + 12}" fill="${bad ? '#c62828' : '#222'}">${escapeXml(note)}</text>`,
      );
      y += barH + gap;
    }
    y += 12;
  }
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y + 10}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="10" y="22" font-size="15" font-weight="bold">webhook-inbox vs baselines and peers: requests/s (median), Express, PostgreSQL</text>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
}

function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** The load over the run, beside its figures: what the machine was doing, not a filter. */
export function loadSentence(cells: Cell[], o: Pick<ReportOptions, 'loadAtStart' | 'loadAtEnd'>): string {
  const range = (xs: number[]) =>
    xs.length ? `${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}` : '–';
  return (
    `Load average (1 min) ${o.loadAtStart.toFixed(2)} when the run started, ${o.loadAtEnd.toFixed(2)} at its end; ` +
    `${range(cells.map((c) => c.loadBefore))} before its cells, ${range(cells.map((c) => c.loadAfter))} after them ` +
    "(every cell counted: ratios compare cells of the same run; each cell's load is in bench/results/latest.json)."
  );
}

export function report(cells: Cell[], o: ReportOptions): Goal[] {
  const rs = rows(cells);
  const gs = goals(cells);
  const m = machine(o.postgresUrl);
  const body = rs.map(rowCells);
  console.log(`\n${table(HEADER, body)}\n`);
  console.log(
    table(
      ['goal', 'target', 'measured', 'met'],
      gs.map((g) => goalCells(g, 'NO')),
    ),
  );
  console.log(`\n${loadSentence(cells, o)}`);
  mkdirSync(join(here, 'results'), { recursive: true });
  const at = new Date().toISOString();
  writeFileSync(
    join(here, 'results', o.resultsFile),
    `${JSON.stringify({ at, command: o.command, options: o, machine: m, rows: rs, goals: gs, cells: cells.map(({ drainMs, ...c }) => ({ ...c, drains: drainMs.length })) }, null, 2)}\n`,
  );
  if (!o.writeMarkdown) return gs;
  writeFileSync(join(here, 'results', 'chart.svg'), chart(rs));
  const generated = [
    '<!-- bench:begin (generated by `npm run bench`; edit outside these markers) -->',
    `Measured ${at} with \`${o.command}\` (${o.runs} run(s) of ${o.duration} s per cell after a ${o.warmup} s warm-up, ` +
      `${o.connections} connections, pool of ${o.poolSize} PostgreSQL connections per server, each server compiled by tsc as the package ships (tsconfig.bench.json), run by plain Node; ${o.pinned ? 'server pinned to core 0 and load generator to core 1 with taskset; PostgreSQL unpinned' : 'not pinned'}; ${o.elapsedS} s in all).`,
    '',
    `Machine: ${m.nproc} × ${m.cpu}, ${m.memoryGb} GB, Node ${m.node}, PostgreSQL ${m.postgres}, Redis ${m.redis}. ` +
      loadSentence(cells, o),
    '',
    '![requests/s per workload and contender](bench/results/chart.svg)',
    '',
    '### Goals',
    '',
    markdownTable(
      ['goal', 'target', 'measured', 'met'],
      gs.map((g) => goalCells(g, '**no**')),
    ),
    '',
    '### All cells (medians over runs; non-2xx, double-applied, out-of-order and held summed over runs)',
    '',
    markdownTable(HEADER, body),
    '',
    '### Contenders',
    '',
    ...Object.entries(CONTENDERS)
      .filter(([name]) => rs.some((r) => r.contender === name))
      .map(([name, spec]) => `- \`${name}\`: ${spec.description}`),
    '',
    '### Workloads',
    '',
    ...Object.values(WORKLOADS)
      .filter((w) => rs.some((r) => r.workload === w.name))
      .map((w) => `- \`${w.name}\`: ${w.description}`),
    '<!-- bench:end -->',
  ].join('\n');
  const file = join(root, 'BENCHMARKS.md');
  const existing = existsSync(file)
    ? readFileSync(file, 'utf8')
    : '# Benchmarks\n\n<!-- bench:begin -->\n<!-- bench:end -->\n';
  const updated = existing.replace(/<!-- bench:begin[\s\S]*?<!-- bench:end -->/, generated);
  writeFileSync(file, updated);
  return gs;
}
