/**
 * ARCHITECTURE.md is the map, and its rules are true: every import under src/ and adapters/
 * (type imports and re-exports included) is checked against the `layers` and `only` blocks
 * of its "What may import what" section, no import closes a circle, and every file the page
 * names exists. No database: it reads files.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, test } from 'vitest';

const root = resolve(import.meta.dirname, '..');
const architecture = readFileSync(join(root, 'ARCHITECTURE.md'), 'utf8');

function sourceFiles(dir: string): string[] {
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(root, path)).isDirectory()) return sourceFiles(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

/** Each file's relative imports, resolved to repository paths (`import type`, `export … from` and `import()` included). */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of [...sourceFiles('src'), ...sourceFiles('adapters')]) {
    const { importedFiles } = ts.preProcessFile(readFileSync(join(root, file), 'utf8'), true, true);
    const targets = importedFiles
      .map((i) => i.fileName)
      .filter((name) => name.startsWith('.'))
      .map((name) => relative(root, resolve(root, dirname(file), name.replace(/\.js$/, '.ts'))));
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** The lines of the fenced block of `lang` in ARCHITECTURE.md, without comments and blank lines. */
function block(lang: string): string[][] {
  const match = new RegExp(`\`\`\`${lang}\\n([\\s\\S]*?)\`\`\``).exec(architecture);
  if (!match) throw new Error(`ARCHITECTURE.md has no \`\`\`${lang} block`);
  return match[1]
    .split('\n')
    .map((line) => line.replace(/#.*/, '').trim())
    .filter(Boolean)
    .map((line) => line.split(/\s+/));
}

const under = (file: string, path: string) => (path.endsWith('/') ? file.startsWith(path) : file === path);

/** The rank of a file's layer (0 is the top): its most specific entry's. */
function layerOf(layers: string[][], file: string): { rank: number; name: string } {
  let best: { rank: number; name: string; length: number } | undefined;
  layers.forEach(([name, ...paths], rank) => {
    for (const path of paths) {
      if (!under(file, path)) continue;
      const length = path.endsWith('/') ? path.length : Number.POSITIVE_INFINITY;
      if (!best || length > best.length) best = { rank, name, length };
    }
  });
  if (!best) throw new Error(`${file} is in no layer of ARCHITECTURE.md`);
  return best;
}

/** Every import that breaks a rule of ARCHITECTURE.md, as `from -> to (why)`. */
function brokenRules(graph: Map<string, string[]>): string[] {
  const layers = block('layers');
  const only = block('only');
  const broken: string[] = [];
  for (const [from, targets] of graph) {
    for (const to of targets) {
      const a = layerOf(layers, from);
      const b = layerOf(layers, to);
      if (b.rank < a.rank) broken.push(`${from} -> ${to} (${a.name} imports ${b.name}, a layer above it)`);
      for (const [first, ...rest] of only) {
        if (first === 'imported-by') {
          const [target, ...importers] = rest;
          if (under(to, target) && !importers.some((p) => under(from, p)))
            broken.push(`${from} -> ${to} (only ${importers.join(', ')} import ${target})`);
        } else if (under(from, first) && !rest.some((p) => under(to, p))) {
          broken.push(`${from} -> ${to} (${first} imports only ${rest.join(', ')})`);
        }
      }
    }
  }
  return broken;
}

/** Import circles (strongly connected components of more than one file, or a file importing itself). */
function circles(graph: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let next = 0;
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || graph.get(v)?.includes(v)) found.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

/** Paths ARCHITECTURE.md names: written out (`src/…`), or listed in the map under their folder. */
function namedPaths(): string[] {
  const named = new Set<string>();
  for (const [path] of architecture.matchAll(
    /\b(?:src|adapters|test|bench|ops|scripts|examples)\/[\w./-]*\w/g,
  ))
    named.add(path);
  const map = /## The map\n+```\n([\s\S]*?)```/.exec(architecture)?.[1] ?? '';
  let folder = '';
  for (const line of map.split('\n')) {
    const top = /^((?:src\/|adapters\/|ops\/)[\w/]*)/.exec(line);
    if (top) folder = top[1].endsWith('/') ? top[1] : '';
    const listed = /^ {2}([\w-]+\.ts)(?:, ([\w-]+\.ts))*/.exec(line);
    if (listed && folder)
      for (const name of line
        .trim()
        .split(/[\s,]+/)
        .filter((w) => /^[\w-]+\.ts$/.test(w)))
        named.add(folder + name);
  }
  return [...named];
}

describe('ARCHITECTURE.md, against the code', () => {
  const graph = importGraph();

  test('every import keeps the rules of "What may import what", type imports included', () => {
    expect(brokenRules(graph)).toEqual([]);
  });

  test('no import circle, type imports included', () => {
    expect(circles(graph)).toEqual([]);
  });

  test('the rules catch a forbidden import', () => {
    const broken = new Map(graph);
    broken.set('src/db/sql/claim.ts', [
      ...(graph.get('src/db/sql/claim.ts') ?? []),
      'src/runtime/runtime.ts',
    ]);
    broken.set('src/sender/outbox.ts', [
      ...(graph.get('src/sender/outbox.ts') ?? []),
      'src/db/sql/tables.ts',
    ]);
    broken.set('src/runtime/runtime.ts', [
      ...(graph.get('src/runtime/runtime.ts') ?? []),
      'src/db/sql/claim.ts',
    ]);
    // An SQL module reaching up into the runtime; the sender reaching into the inbox's SQL.
    expect(brokenRules(broken)).toEqual(
      expect.arrayContaining([
        'src/db/sql/claim.ts -> src/runtime/runtime.ts (db imports runtime, a layer above it)',
        expect.stringMatching(
          /^src\/db\/sql\/claim\.ts -> src\/runtime\/runtime\.ts \(src\/db\/sql\/ imports only /,
        ),
        expect.stringMatching(
          /^src\/sender\/outbox\.ts -> src\/db\/sql\/tables\.ts \(src\/sender\/ imports only /,
        ),
      ]),
    );
    expect(circles(broken).flat()).toEqual(
      expect.arrayContaining(['src/runtime/runtime.ts', 'src/db/sql/claim.ts']),
    );
  });

  test('every file it names exists', () => {
    const missing = namedPaths().filter((path) => !existsSync(join(root, path)));
    expect(missing).toEqual([]);
  });
});
