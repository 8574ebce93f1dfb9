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
import { CONTENDERS, type Stats } from './contenders.js';
import { WORKLOADS } from './workloads.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');

export interface Load {
  rps: number;
  p50: number;
  p99: number;
  total: number;
  non2xx: number;
  errors: number;
}

export interface Cell extends Load, Stats {
  run: number;
  workload: string;
  contender: string;
  /** The server process's CPU (user + system) per request, in µs. */
  cpuUs: number;
  /** PostgreSQL's CPU (every backend) per request, in µs. */
  pgUs: number;
  /** One-minute load average before the cell's server started and at its end: printed, never a filter. */
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
  instances: number;
  resultsFile: string;
  loadAtStart: number;
  loadAtEnd: number;
}

function median(xs: number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Nearest rank. */
function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

/** The reference each workload's ratio column is taken against (same run, same workload unless said). */
const REFERENCE: Record<string, CellOf> = {
  unique: ['unique', 'bare'],
  dup50: ['dup50', 'inbox'],
  replay: ['replay', 'hello'],
  storm: ['storm', 'inbox'],
  ordered: ['unique', 'inbox'],
  shuffled: ['ordered', 'inbox'],
};

/** A workload and contender over runs: medians of the figures, sums of the counts. */
export interface Row
  extends Omit<Cell, 'run' | 'total' | 'applied' | 'distinct' | 'drainMs' | 'loadBefore' | 'loadAfter'> {
  ratio: number;
  ratioOf: string;
  runs: number;
}

type CellOf = [workload: string, contender: string];

/** Median over runs of (a / b, the fastest of b), each pair taken from the same run. */
function ratio(cells: Cell[], a: CellOf, bs: CellOf[]): number {
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
      ratio: ref ? ratio(cells, [c.workload, c.contender], [ref]) : Number.NaN,
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

export function goals(cells: Cell[]): Goal[] {
  const has = (w: string, c: string) => cells.some((x) => x.workload === w && x.contender === c);
  const out: Goal[] = [];
  /** A ratio goal: `a` against `b`, or against the fastest of several. */
  const check = (goal: string, target: number, a: CellOf, ...bs: CellOf[]) => {
    if (!has(...a) || !bs.some((x) => has(...x))) {
      out.push({ goal, target: `≥ ${target}×`, measured: 'not measured', met: null });
      return;
    }
    const r = ratio(cells, a, bs);
    out.push({ goal, target: `≥ ${target}×`, measured: `${fmt(r, 2)}×`, met: r >= target });
  };
  const unique = (contender: string): CellOf => ['unique', contender];
  const replay = (contender: string): CellOf => ['replay', contender];
  check('unique deliveries: inbox vs bare', 0.9, unique('inbox'), unique('bare'));
  const peers = [unique('node-idempotency'), unique('express-idempotency')];
  check('unique deliveries: inbox vs the fastest peer', 0.95, unique('inbox'), ...peers);
  check('deferred acknowledgements: inbox-deferred vs hello', 0.5, unique('inbox-deferred'), unique('hello'));
  // Not a goal: how far the inbox is from the smallest correct inbox one would write by hand.
  if (has('unique', 'inbox') && has('unique', 'handmade')) {
    const r = ratio(cells, unique('inbox'), [unique('handmade')]);
    const goal = 'unique deliveries: inbox vs handmade (reference, not a goal)';
    out.push({ goal, target: '–', measured: `${fmt(r, 2)}×`, met: null });
  }
  check('unique deliveries: inbox-redis vs bare', 0.88, unique('inbox-redis'), unique('bare'));
  const pgliteGoal = 'unique deliveries on PGlite: inbox-pglite vs bare-pglite';
  check(pgliteGoal, 0.8, unique('inbox-pglite'), unique('bare-pglite'));
  const pglite = cells.filter((c) => c.workload === 'unique' && c.contender === 'inbox-pglite');
  if (pglite.length) {
    const spread = median(pglite.map((c) => c.p99 / Math.max(c.p50, 0.001)));
    const goal = 'inbox-pglite latency: p99 vs p50';
    out.push({ goal, target: '≤ 10×', measured: `${fmt(spread, 1)}×`, met: spread <= 10 });
  }
  const duplicates = 'duplicates, as shipped (in-process cache): inbox vs hello (replay)';
  check(duplicates, 0.95, replay('inbox'), replay('hello'));
  const withoutRedis = 'duplicates without Redis, in-process cache off: inbox-pg vs hello (replay)';
  check(withoutRedis, 0.75, replay('inbox-pg'), replay('hello'));
  check('duplicates with Redis: inbox-redis vs hello (replay)', 0.9, replay('inbox-redis'), replay('hello'));
  check('ordered over 1000 keys vs unordered (inbox)', 0.8, ['ordered', 'inbox'], unique('inbox'));
  const drains = cells
    .filter((c) => c.contender === 'inbox' && c.workload === 'shuffled')
    .flatMap((c) => c.drainMs);
  const [p99, p50] = [percentile(drains, 99), percentile(drains, 50)];
  out.push({
    goal: `drain latency p99${drains.length ? ` (${drains.length} held events drained)` : ''}`,
    target: '≤ 20 ms',
    measured: drains.length ? `${fmt(p99, 1)} ms (p50 ${fmt(p50, 1)} ms)` : 'not measured',
    met: drains.length ? p99 <= 20 : null,
  });
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

/** The columns of the cells' table: header and cell, side by side. */
const COLUMNS: Array<[string, (r: Row) => string]> = [
  ['workload', (r) => r.workload],
  ['contender', (r) => r.contender],
  ['req/s', (r) => fmt(r.rps)],
  ['ratio', (r) => fmt(r.ratio, 2)],
  ['vs', (r) => r.ratioOf],
  ['p50 ms', (r) => fmt(r.p50, 1)],
  ['p99 ms', (r) => fmt(r.p99, 1)],
  ['server µs/req', (r) => fmt(r.cpuUs)],
  ['pg µs/req', (r) => fmt(r.pgUs)],
  ['non-2xx', (r) => String(r.non2xx)],
  ['double-applied', (r) => String(r.doubleApplied)],
  ['out-of-order', (r) => String(r.outOfOrder)],
  ['held', (r) => String(r.held)],
];
const HEADER = COLUMNS.map(([name]) => name);
const rowCells = (r: Row) => COLUMNS.map(([, cell]) => cell(r));

/** The RSS goal, from bench/results/long.json (written by `npm run bench -- --long N`). */
export function longGoal(longFile = join(here, 'results', 'long.json')): Goal {
  const measured = 'run `npm run bench -- --long N`';
  if (!existsSync(longFile))
    return { goal: 'RSS growth over 10^6 deliveries', target: '< 50 MB', measured, met: null };
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

/** After a `--long` run: its RSS row replaces the one in BENCHMARKS.md and latest.json, nothing else. */
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

const GOAL_HEADER = ['goal', 'target', 'measured', 'met'];
function goalCells(g: Goal, no: string): string[] {
  return [g.goal, g.target, g.measured, g.met === null ? '–' : g.met ? 'yes' : no];
}

/** Horizontal bars, one group per workload, each group on its own scale (req/s printed). */
export function chart(rs: Row[]): string {
  const [barH, gap, labelW, plotW] = [16, 4, 170, 420];
  const text = (x: number, y: number, attributes: string, content: string) =>
    `<text x="${x}" y="${y + 12}"${attributes}>${content.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')}</text>`;
  const colour = (c: string) =>
    c.startsWith('inbox')
      ? '#2e7d32'
      : c === 'naive'
        ? '#c62828'
        : c === 'hello' || c === 'bare'
          ? '#757575'
          : '#ef6c00';
  let y = 40;
  const parts: string[] = [];
  for (const w of new Set(rs.map((r) => r.workload))) {
    const group = rs.filter((r) => r.workload === w);
    const max = Math.max(...group.map((r) => r.rps));
    parts.push(
      text(10, y, ' font-weight="bold"', w),
      text(labelW, y, ' fill="#555"', WORKLOADS[w]?.description ?? ''),
    );
    y += 20;
    for (const r of group) {
      const len = Math.max(1, (r.rps / max) * plotW);
      const bad = r.doubleApplied + r.outOfOrder;
      const note = `${fmt(r.rps)} req/s${bad ? ` — ${r.doubleApplied} double-applied, ${r.outOfOrder} out of order` : ''}${r.non2xx ? ` (${r.non2xx} non-2xx)` : ''}`;
      parts.push(
        text(labelW - 8, y, ' text-anchor="end"', r.contender),
        `<rect x="${labelW}" y="${y}" width="${len.toFixed(1)}" height="${barH}" fill="${colour(r.contender)}"/>`,
        text(labelW + len + 6, y, ` fill="${bad ? '#c62828' : '#222'}"`, note),
      );
      y += barH + gap;
    }
    y += 12;
  }
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${labelW + plotW + 220}" height="${y + 10}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="10" y="22" font-size="15" font-weight="bold">webhook-inbox vs baselines and peers: requests/s (median), Express, PostgreSQL</text>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
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
  const goalRows = (no: string) => gs.map((g) => goalCells(g, no));
  console.log(table(GOAL_HEADER, goalRows('NO')));
  console.log(`\n${loadSentence(cells, o)}`);
  mkdirSync(join(here, 'results'), { recursive: true });
  const at = new Date().toISOString();
  writeFileSync(
    join(here, 'results', o.resultsFile),
    `${JSON.stringify({ at, command: o.command, options: o, machine: m, rows: rs, goals: gs, cells: cells.map(({ drainMs, ...c }) => ({ ...c, drains: drainMs.length })) }, null, 2)}\n`,
  );
  if (!o.writeMarkdown) return gs;
  writeFileSync(join(here, 'results', 'chart.svg'), chart(rs));
  const list = (entries: Array<[string, { description: string }]>, measured: (name: string) => boolean) =>
    entries
      .filter(([name]) => measured(name))
      .map(([name, x]) => `- \`${name}\`: ${x.description}`)
      .join('\n');
  const generated = [
    '<!-- bench:begin (generated by `npm run bench`; edit outside these markers) -->\n' +
      `Measured ${at} with \`${o.command}\` (${o.runs} run(s) of ${o.duration} s per cell after a ${o.warmup} s warm-up, ` +
      `${o.connections} connections, pool of ${o.poolSize} PostgreSQL connections per server, each server compiled by tsc as the package ships (tsconfig.bench.json), run by plain Node; ${o.pinned ? 'server pinned to core 0 and load generator to core 1 with taskset; PostgreSQL unpinned' : 'not pinned'}; ${o.elapsedS} s in all).`,
    `Machine: ${m.nproc} × ${m.cpu}, ${m.memoryGb} GB, Node ${m.node}, PostgreSQL ${m.postgres}, Redis ${m.redis}. ` +
      loadSentence(cells, o),
    '![requests/s per workload and contender](bench/results/chart.svg)',
    '### Goals',
    markdownTable(GOAL_HEADER, goalRows('**no**')),
    '### All cells (medians over runs; non-2xx, double-applied, out-of-order and held summed over runs)',
    markdownTable(HEADER, body),
    '### Contenders',
    list(Object.entries(CONTENDERS), (name) => rs.some((r) => r.contender === name)),
    '### Workloads',
    `${list(Object.entries(WORKLOADS), (name) => rs.some((r) => r.workload === name))}\n<!-- bench:end -->`,
  ].join('\n\n');
  const file = join(root, 'BENCHMARKS.md');
  const existing = existsSync(file)
    ? readFileSync(file, 'utf8')
    : '# Benchmarks\n\n<!-- bench:begin -->\n<!-- bench:end -->\n';
  writeFileSync(file, existing.replace(/<!-- bench:begin[\s\S]*?<!-- bench:end -->/, generated));
  return gs;
}
