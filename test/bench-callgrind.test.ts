import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newestDumpInstructions } from '../bench/callgrind.js';

// The instruction counts in BENCHMARKS.md are read from callgrind's dumps by this function: a
// wrong pick (an older dump, another process's, another thread's) would give a wrong figure.
describe('reading callgrind dumps (bench/callgrind.ts)', () => {
  let dir: string;
  const dump = (name: string, instructions: number) =>
    writeFileSync(
      join(dir, name),
      `version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: ${instructions}\ntotals: ${instructions}\n`,
    );
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'wi-callgrind-test-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('takes the newest dump of the process, by number, not by name', () => {
    dump('cg.123', 1); // written at exit: the whole run, never the newest dump
    dump('cg.123.1', 10);
    dump('cg.123.2', 20);
    dump('cg.123.10', 100);
    dump('cg.1234.11', 999); // another process whose pid starts the same
    expect(newestDumpInstructions(dir, 123)).toBe(100);
  });

  it("takes a thread's own dump with --separate-threads", () => {
    dump('cg.123.1-01', 10);
    dump('cg.123.2-01', 20);
    dump('cg.123.2-02', 500);
    dump('cg.123.3-02', 700);
    expect(newestDumpInstructions(dir, 123, '01')).toBe(20);
  });

  it('says so when the process has no dump, or a dump has no summary', () => {
    dump('cg.77.1', 5);
    expect(() => newestDumpInstructions(dir, 123)).toThrow(/no callgrind dump of process 123/);
    writeFileSync(join(dir, 'cg.123.1'), 'events: Ir\n');
    expect(() => newestDumpInstructions(dir, 123)).toThrow(/has no summary line/);
  });
});
