/**
 * Every TypeScript snippet of the README, docs/citus.md and docs/operations.md's retention section, type-checks
 * against the sources, as a user's file would against the package (`webhook-inbox`,
 * `webhook-inbox/express`, … mapped by tsconfig.json's paths). A snippet may use `handle`, the handler the README defines once; it
 * is declared for the others. What a snippet gets wrong (an option that does not exist, a body
 * typed as what the provider does not send) fails here.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { expect, test } from 'vitest';

const root = new URL('..', import.meta.url).pathname;

/** The ```ts blocks of a Markdown text, in order. */
function snippets(markdown: string): string[] {
  return [...markdown.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
}

/** The text of a Markdown file from a `## ` heading to the next one. */
function section(file: string, heading: string): string {
  const text = readFileSync(join(root, file), 'utf8');
  const start = text.indexOf(`\n## ${heading}\n`);
  expect(start, `${file} has a section ${heading}`).toBeGreaterThanOrEqual(0);
  const end = text.indexOf('\n## ', start + 1);
  return text.slice(start, end < 0 ? undefined : end);
}

test("the README's TypeScript snippets type-check", () => {
  const found = snippets(readFileSync(join(root, 'README.md'), 'utf8'));
  expect(found.length).toBeGreaterThanOrEqual(7);
  typeChecks(found, 'readme');
}, 120_000);

test("docs/operations.md's retention snippets type-check", () => {
  const found = snippets(section('docs/operations.md', 'Retention'));
  expect(found.length).toBeGreaterThanOrEqual(1);
  typeChecks(found, 'operations-retention');
}, 120_000);

test("docs/citus.md's example type-checks", () => {
  const found = snippets(readFileSync(join(root, 'docs/citus.md'), 'utf8'));
  expect(found.length).toBeGreaterThanOrEqual(1);
  typeChecks(found, 'citus');
}, 120_000);

function typeChecks(found: string[], label: string): void {
  const dir = join(root, '.tmp', `${label}-snippets-${process.pid}`);
  mkdirSync(dir, { recursive: true });
  try {
    const files = found.map((code, i) => {
      const file = join(dir, `snippet-${i + 1}.ts`);
      const definesHandle = /\b(const|function) handle\b/.test(code);
      const usesHandle = /\bhandle\b/.test(code);
      const preamble =
        usesHandle && !definesHandle ? "declare const handle: import('webhook-inbox').Handler;\n" : '';
      writeFileSync(file, `${preamble}${code}\nexport {};\n`);
      return file;
    });
    const config = ts.getParsedCommandLineOfConfigFile(
      join(root, 'tsconfig.json'),
      {},
      {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: (d) => {
          throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
        },
      },
    );
    const program = ts.createProgram(files, { ...config!.options, noEmit: true, incremental: false });
    const errors = files.flatMap((file) =>
      ts.getPreEmitDiagnostics(program, program.getSourceFile(file)).map((d) => {
        const where =
          d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : undefined;
        const name = d.file ? d.file.fileName.slice(dir.length + 1) : '?';
        return `${name}:${where ? where.line + 1 : '?'}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
      }),
    );
    expect(errors).toEqual([]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
