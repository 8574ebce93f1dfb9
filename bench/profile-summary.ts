/**
 * Summarises V8 CPU profiles written by `npm run bench -- --cpu-prof` (one per server, in
 * bench/results/profiles): where each server's CPU went, by package or source file, and the
 * hottest functions by self time.
 *
 *   npx tsx bench/profile-summary.ts bench/results/profiles/inbox-unique-r1.cpuprofile …
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

function category(url: string, fn: string): string {
  if (!url) return fn.startsWith('(') ? fn : '(native)';
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1];
  if (url.startsWith('node:')) return `node:${url.slice(5).split('/')[1] ?? url.slice(5)}`;
  const own = /\/(src|adapters|bench|examples)\/([^/]+)$/.exec(url.replace(/\/node_modules\/.*/, ''));
  if (own) return `${own[1]}/${own[2]}`;
  return url;
}

export function summarise(file: string, top = 12): string {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as {
    nodes: Node[];
    startTime: number;
    endTime: number;
  };
  const total = profile.nodes.reduce((s, n) => s + (n.hitCount ?? 0), 0);
  const byCategory = new Map<string, number>();
  const byFunction = new Map<string, number>();
  for (const n of profile.nodes) {
    const hits = n.hitCount ?? 0;
    if (!hits) continue;
    const cat = category(n.callFrame.url, n.callFrame.functionName);
    byCategory.set(cat, (byCategory.get(cat) ?? 0) + hits);
    const fn = `${n.callFrame.functionName || '(anonymous)'} ${cat}:${n.callFrame.lineNumber + 1}`;
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + hits);
  }
  const pct = (x: number) => `${((100 * x) / total).toFixed(1).padStart(5)}%`;
  const idle = (byCategory.get('(idle)') ?? 0) / total;
  const lines = [
    `${basename(file)}: ${((profile.endTime - profile.startTime) / 1e6).toFixed(1)} s profiled, ${(100 * (1 - idle)).toFixed(0)}% busy`,
    '  by package / file (self time):',
    ...[...byCategory]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, v]) => `    ${pct(v)}  ${k}`),
    '  hottest functions (self time):',
    ...[...byFunction]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, v]) => `    ${pct(v)}  ${k}`),
  ];
  return lines.join('\n');
}

/** A profile file, or a directory of them (one per thread): the one with the most samples. */
function busiest(path: string): string {
  if (!statSync(path).isDirectory()) return path;
  const files = readdirSync(path)
    .filter((f) => f.endsWith('.cpuprofile'))
    .map((f) => join(path, f));
  return files.sort((a, b) => statSync(b).size - statSync(a).size)[0];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const f of process.argv.slice(2)) console.log(`${basename(f)}: ${summarise(busiest(f))}\n`);
}
