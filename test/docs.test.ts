/**
 * The documentation against the code: the options table of docs/configuration.md against
 * `resolveOptions` (every option documented, nothing documented that is not an option, literal
 * defaults equal to what the code applies), a section in docs/outcomes.md for every outcome
 * kind (where problem `type` URLs point), the metrics table against `METRIC_NAMES`, no broken relative link in the README or docs/, and
 * the README's promises to a new user (install line, the two first commands, its length).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, test } from 'vitest';
import { anchorsOf, brokenLinks } from '../scripts/check-doc-links.js';
import { parseDuration } from '../src/duration.js';
import { METRIC_NAMES, OutcomeKind } from '../src/index.js';
import { DOCS_BASE, docsUrl, methodNotAllowed, PROBLEM_TYPE_BASE, problem } from '../src/outcome.js';
import { resolveOptions } from '../src/runtime/resolve-options.js';
import { resolveSenderOptions } from '../src/sender/options.js';

const root = resolve(import.meta.dirname, '..');
const read = (path: string) => readFileSync(join(root, path), 'utf8');

/** Rows of the Markdown tables whose header starts `| option | default |`: [name, default]. */
function optionRows(markdown: string): Array<[name: string, fallback: string]> {
  const rows: Array<[string, string]> = [];
  let inTable = false;
  for (const line of markdown.split('\n')) {
    if (/^\|\s*option\s*\|\s*default\s*\|/.test(line)) inTable = true;
    else if (!line.startsWith('|')) inTable = false;
    else if (inTable && !/^\|\s*-/.test(line)) {
      const [, name, fallback] = line.split('|').map((cell) => cell.trim());
      for (const each of name.split('/')) {
        const option = /^`([A-Za-z]+)/.exec(each.trim())?.[1];
        if (option) rows.push([option, fallback]);
      }
    }
  }
  return rows;
}

/** A default written as one literal (`5000`, `'skip'`, `false`, `{ id: 'x' }`), or undefined. */
function literal(cell: string): unknown {
  const code = /^`([^`]+)`$/.exec(cell)?.[1];
  if (code === undefined) return undefined;
  const json = code.replace(/'/g, '"').replace(/([{,]\s*)([A-Za-z]+)\s*:/g, '$1"$2":');
  try {
    return JSON.parse(json);
  } catch {
    return undefined;
  }
}

const resolved = resolveOptions({ handle: () => {}, db: 'memory' }) as unknown as Record<string, unknown>;

describe('docs/configuration.md, against resolveOptions', () => {
  const rows = optionRows(read('docs/configuration.md'));
  const documented = rows.map(([name]) => name);

  test('every option is documented, once', () => {
    expect([...documented].sort()).toEqual(Object.keys(resolved).sort());
  });

  test('each literal default is the value the code applies', () => {
    let compared = 0;
    for (const [name, cell] of rows) {
      const value = literal(cell);
      if (value === undefined) continue;
      compared++;
      // A duration option resolves to milliseconds ('24h' → 86400000).
      const expected =
        typeof value === 'string' && typeof resolved[name] === 'number' ? parseDuration(value) : value;
      expect(resolved[name], `${name}: documented ${cell}`).toEqual(expected);
    }
    expect(compared).toBeGreaterThan(25);
  });

  test('option tables on the topic pages name only options that exist', () => {
    const pages = [
      'ordering.md',
      'body-sourced-events.md',
      'deferred-mode.md',
      'redis.md',
      'observability.md',
      'operations.md',
      'configuration.md',
    ];
    for (const page of pages) {
      for (const [name] of optionRows(read(`docs/${page}`))) {
        expect(Object.keys(resolved), `docs/${page}: \`${name}\``).toContain(name);
      }
    }
  });
});

describe('docs/sender.md, against resolveSenderOptions', () => {
  const sender = resolveSenderOptions({ endpoint: 'http://127.0.0.1:9/' }) as unknown as Record<
    string,
    unknown
  >;
  // Resolved under another name: the secrets are decoded into keys.
  const names = Object.keys(sender).map((name) => (name === 'secretKeys' ? 'secret' : name));
  const rows = optionRows(read('docs/sender.md'));

  test('every sender option is documented, once', () => {
    expect(rows.map(([name]) => name).sort()).toEqual(names.sort());
  });

  test('each literal default is the value the code applies', () => {
    let compared = 0;
    for (const [name, cell] of rows) {
      const value = literal(cell);
      if (value === undefined) continue;
      compared++;
      expect(sender[name], `${name}: documented ${cell}`).toEqual(value);
    }
    expect(compared).toBeGreaterThan(8);
  });
});

describe('outcomes and problem types', () => {
  const anchors = anchorsOf(read('docs/outcomes.md'));

  test.each(Object.values(OutcomeKind))('outcome kind %s has its section in docs/outcomes.md', (kind) => {
    expect(anchors).toContain(kind);
  });

  test("a problem's type URL is that section", () => {
    expect(PROBLEM_TYPE_BASE).toBe(
      'https://github.com/webhook-inbox/webhook-inbox/blob/main/docs/outcomes.md#',
    );
    expect(problem(OutcomeKind.inFlight, 409, 'busy').body.type).toBe(`${PROBLEM_TYPE_BASE}in-flight`);
    expect(methodNotAllowed().body.type).toBe(`${PROBLEM_TYPE_BASE}method-not-allowed`);
  });

  test("the README's outcome table lists every kind a delivery can have", () => {
    const readme = read('README.md');
    for (const kind of Object.values(OutcomeKind).filter((k) => k !== 'health')) {
      expect(readme, kind).toContain(`| \`${kind}\` |`);
    }
  });
});

describe('docs/observability.md, against METRIC_NAMES', () => {
  test('every metric is in the table, and every metric the docs name exists', () => {
    const page = read('docs/observability.md');
    const tableRows = [...page.matchAll(/^\| `(webhook_inbox_[a-z_]+)` \|/gm)].map((m) => m[1]);
    expect([...tableRows].sort()).toEqual(Object.values(METRIC_NAMES).sort());
    for (const docs of ['docs/observability.md', 'docs/redis.md', 'README.md']) {
      for (const [name] of read(docs).matchAll(/webhook_inbox_[a-z_]+(?:_total|_seconds|_events|_keys)\b/g)) {
        expect(Object.values(METRIC_NAMES), `${docs}: ${name}`).toContain(name);
      }
    }
  });
});

/**
 * The text of every string literal and template part of the files under `dirs`, with where it is:
 * what an error, a log line or a page may say to a user.
 */
function stringsOf(dirs: string[]): Array<{ where: string; text: string }> {
  const found: Array<{ where: string; text: string }> = [];
  const walk = (dir: string): string[] =>
    readdirSync(join(root, dir), { withFileTypes: true }).flatMap((entry) =>
      entry.isDirectory()
        ? walk(join(dir, entry.name))
        : entry.name.endsWith('.ts')
          ? [join(dir, entry.name)]
          : [],
    );
  for (const file of dirs.flatMap(walk)) {
    const source = ts.createSourceFile(file, read(file), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node) => {
      if (ts.isStringLiteralLike(node) || ts.isTemplateLiteralToken(node)) {
        const { line } = source.getLineAndCharacterOfPosition(node.getStart());
        found.push({ where: `${file}:${line + 1}`, text: (node as ts.LiteralLikeNode).text });
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return found;
}

describe('links and the README', () => {
  test('what the package says names a doc by its URL, never by a path the package does not ship', () => {
    // The SQL texts' comments (src/db/) are read by whoever reads the schema's functions, beside the repository.
    const pathsNamed = stringsOf(['src', 'adapters'])
      .filter(({ where }) => !where.startsWith('src/db/'))
      .filter(({ text }) => /(^|[^/\w])docs\/[\w-]+\.md/.test(text))
      .map(({ where, text }) => `${where}: ${text}`);
    expect(pathsNamed).toEqual([]);
    // And the URLs lead to pages that exist.
    expect(existsSync(join(root, 'docs', docsUrl('configuration.md').slice(DOCS_BASE.length)))).toBe(true);
    expect(PROBLEM_TYPE_BASE.startsWith(DOCS_BASE)).toBe(true);
  });

  test('no relative link of the README, the CHANGELOG or docs/ is broken', () => {
    expect(brokenLinks(root)).toEqual([]);
  });

  test('the README: install line, requirements, the first two commands, about 300 lines', () => {
    const readme = read('README.md');
    expect(readme).toContain('npm install webhook-inbox');
    expect(readme).toContain('npm install && npm run demo');
    expect(readme).toContain('npm install && npm test');
    expect(readme).toMatch(/Node\.js ≥ 20\.19/);
    expect(readme).toMatch(/PostgreSQL 15/);
    expect(readme).not.toMatch(/Kysely `Migrator`/);
    expect(readme.split('\n').length).toBeLessThanOrEqual(320);
  });
});

describe('the round trips of a new event, against test/round-trips.test.ts', () => {
  // One fact stated in four places: the count test/round-trips.test.ts pins for a new event
  // (its handler runs one statement of its own) is the figure the README and the docs state.
  test('the README, docs/how-it-works.md and ARCHITECTURE.md state the pinned "+ n"', () => {
    const pinning = read('test/round-trips.test.ts');
    expect(pinning).toMatch(/execute\(\); \/\/ the handler's own statement/);
    const newEvent = pinning.slice(pinning.indexOf("it('a new event: "));
    const sent = Number(/expect\(sent\)\.toHaveLength\((\d+)\)/.exec(newEvent)?.[1]);
    const pinned = sent - 1;
    expect(pinned).toBeGreaterThan(0);
    const stated = [
      /your handler's\s+statements \+ (\d+) round trips per new event/.exec(read('README.md')),
      /\| new event, applied now \|[^|]*= yours \+ (\d+)/.exec(read('docs/how-it-works.md')),
      /unique event, applied now[\s\S]*?= the handler's \+ (\d+)/.exec(read('ARCHITECTURE.md')),
    ].map((m) => Number(m?.[1]));
    expect(stated).toEqual([pinned, pinned, pinned]);
  });
});
