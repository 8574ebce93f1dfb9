/**
 * Every TypeScript snippet of the README type-checks against the sources, as a user's file
 * would against the package (`webhook-inbox`, `webhook-inbox/express`, … mapped by
 * tsconfig.json's paths). A snippet may use `handle`, the handler the README defines once; it
 * is declared for the others. What a snippet gets wrong (an option that does not exist, a body
 * typed as what the provider does not send) fails here.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { expect, test } from 'vitest';

const root = new URL('..', import.meta.url).pathname;

/** The README's ```ts blocks, in order. */
function snippets(): string[] {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  return [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
}

test("the README's TypeScript snippets type-check", () => {
  const found = snippets();
  expect(found.length).toBeGreaterThanOrEqual(7);
  const dir = join(root, '.tmp', `readme-snippets-${process.pid}`);
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
}, 120_000);
