/**
 * Checks every relative link of the Markdown pages at the root (README, CHANGELOG, …) and in docs/: the file (or directory)
 * must exist, and an anchor (`page.md#section`, `#section`) must name a heading of that page
 * (GitHub's slugs) or an explicit `<a id="…">`. Links to other sites are not fetched: CI has
 * no network to spare, and they are not ours to keep alive. Exits 1 listing each broken link.
 *
 * Run: `npm run docs` (after TypeDoc), or `tsx scripts/check-doc-links.ts`.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The pages whose links are checked, relative to the repository root. */
export function documentationPages(root: string): string[] {
  // Every Markdown page at the root (README, CHANGELOG, BENCHMARKS, …) and under docs/.
  const pages = readdirSync(root).filter(
    (name) => name.endsWith('.md') && statSync(join(root, name)).isFile(),
  );
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const path = join(dir, entry.name);
      // docs/api is TypeDoc's output: generated, with links of its own making.
      if (entry.isDirectory() && path !== join('docs', 'api')) walk(path);
      else if (entry.isFile() && entry.name.endsWith('.md')) pages.push(path);
    }
  };
  if (existsSync(join(root, 'docs'))) walk('docs');
  return pages;
}

/** Markdown without its fenced and inline code: links there are examples, not links. */
function withoutCode(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/`[^`\n]*`/g, '``');
}

/** GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens. */
export function slug(heading: string): string {
  return heading
    .replace(/<[^>]+>/g, '')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** Every anchor a page offers: its headings' slugs (numbered when repeated) and `<a id|name>`. */
export function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const noFences = markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
  for (const [, heading] of noFences.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = slug(heading);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const [, id] of noFences.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(id);
  return anchors;
}

/** Broken relative links of the pages, as `page: target (why)`. */
export function brokenLinks(root: string): string[] {
  const broken: string[] = [];
  const anchorCache = new Map<string, Set<string>>();
  const anchors = (file: string) => {
    let found = anchorCache.get(file);
    if (!found) {
      found = anchorsOf(readFileSync(file, 'utf8'));
      anchorCache.set(file, found);
    }
    return found;
  };
  for (const page of documentationPages(root)) {
    const file = join(root, page);
    const text = withoutCode(readFileSync(file, 'utf8'));
    const targets = [
      ...[...text.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1]),
      ...[...text.matchAll(/^\[[^\]]+\]:\s*(\S+)/gm)].map((m) => m[1]),
      ...[...text.matchAll(/<(?:a|img)\s[^>]*(?:href|src)="([^"]+)"/g)].map((m) => m[1]),
    ];
    for (const target of targets) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      const [path, anchor] = target.split('#', 2) as [string, string | undefined];
      const destination = path === '' ? file : resolve(dirname(file), decodeURIComponent(path));
      if (!existsSync(destination)) {
        broken.push(`${page}: ${target} (no such file)`);
        continue;
      }
      if (anchor === undefined || anchor === '') continue;
      if (statSync(destination).isDirectory() || !destination.endsWith('.md')) {
        broken.push(`${page}: ${target} (an anchor into something that is not a Markdown page)`);
      } else if (!anchors(destination).has(decodeURIComponent(anchor))) {
        broken.push(
          `${page}: ${target} (no heading or <a id> "${anchor}" in ${relative(root, destination)})`,
        );
      }
    }
  }
  return broken;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
  const pages = documentationPages(root);
  const broken = brokenLinks(root);
  if (broken.length > 0) {
    console.error(`${broken.length} broken relative link(s):\n${broken.map((b) => `  ${b}`).join('\n')}`);
    process.exit(1);
  }
  console.log(`relative links: ${pages.length} pages checked, none broken`);
}
