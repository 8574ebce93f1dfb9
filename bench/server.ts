/**
 * One contender in its own process (started by bench/run.ts, pinned to its own core).
 * argv[2] is the JSON ContenderConfig. Talks to the parent over IPC: `ready` with the port,
 * then answers `stats`, `analyze`, `rss` and `close`; and `zero` and `dump`, the markers of
 * bench/server-instructions.ts, which runs this process under callgrind.
 */
import { getPriority, loadavg } from 'node:os';
import { CONTENDERS, type ContenderConfig } from './contenders.js';

type Command =
  | { id: number; cmd: 'stats'; prefix: string }
  | { id: number; cmd: 'analyze' | 'rss' | 'close' | 'zero' | 'dump' };

const config = JSON.parse(process.argv[2]) as ContenderConfig;
const spec = CONTENDERS[config.contender];
if (!spec) {
  console.error(`bench server: unknown contender ${config.contender}`);
  process.exit(2);
}
const running = await spec.start(config);
process.send!({ type: 'ready', port: running.port });

process.on('message', async (m: Command) => {
  try {
    switch (m.cmd) {
      case 'stats':
        process.send!({ id: m.id, value: await running.stats(m.prefix) });
        break;
      case 'analyze':
        await running.analyze();
        process.send!({ id: m.id, value: null });
        break;
      case 'rss':
        (globalThis as any).gc?.();
        process.send!({ id: m.id, value: process.memoryUsage().rss });
        break;
      // Under `valgrind --tool=callgrind --zero-before=uv_os_getpriority
      // --dump-before=uv_loadavg`, these two calls zero the instruction counters and write
      // them out; elsewhere they cost a system call each.
      case 'zero':
        getPriority();
        process.send!({ id: m.id, value: null });
        break;
      case 'dump':
        loadavg();
        process.send!({ id: m.id, value: null });
        break;
      case 'close':
        await running.close();
        process.send!({ id: m.id, value: null }, () => process.exit(0));
        break;
    }
  } catch (err) {
    process.send!({ id: m.id, error: String((err as Error)?.stack ?? err) });
  }
});
process.on('disconnect', () => process.exit(0));
