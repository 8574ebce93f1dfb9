/**
 * The bench names a running RabbitMQ before a run, and not one that is paused. A copy of
 * `sleep` named `beam.smp` stands in for it: the check reads only the process's name and state.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { neighbourWarnings, noisyNeighbours } from '../bench/neighbours.js';

describe.runIf(process.platform === 'linux')('the bench names noisy neighbours', () => {
  let child: ChildProcess | undefined;
  let dir: string | undefined;
  afterEach(() => {
    child?.kill('SIGKILL');
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  function fakeRabbit(): ChildProcess {
    dir = mkdtempSync(join(tmpdir(), 'neighbour-'));
    const beam = join(dir, 'beam.smp');
    copyFileSync('/bin/sleep', beam);
    return spawn(beam, ['60'], { stdio: 'ignore' });
  }

  const ours = () => noisyNeighbours().filter((n) => n.pid === child!.pid);

  it('a running beam.smp is named with the commands that pause and resume it; a paused one is not', async () => {
    child = fakeRabbit();
    await vi.waitFor(() => expect(ours()).toHaveLength(1), { timeout: 5000, interval: 20 });
    const [warning] = neighbourWarnings(ours());
    expect(warning).toContain('RabbitMQ');
    expect(warning).toContain(`kill -STOP ${child.pid}`);
    expect(warning).toContain(`kill -CONT ${child.pid}`);

    child.kill('SIGSTOP');
    await vi.waitFor(() => expect(ours()).toEqual([]), { timeout: 5000, interval: 20 });
    child.kill('SIGCONT');
    await vi.waitFor(() => expect(ours()).toHaveLength(1), { timeout: 5000, interval: 20 });
  });

  it('other processes are not named', () => {
    expect(noisyNeighbours().filter((n) => n.pid === process.pid)).toEqual([]);
    expect(neighbourWarnings([])).toEqual([]);
  });
});
