/**
 * One contender in its own process (started by bench/run.ts, pinned to its own core).
 * argv[2] is the JSON ContenderConfig. Talks to the parent over IPC: `ready` with the port,
 * then answers `stats`, `analyze`, `rss` and `close`; and, for bench/server-cost.ts, `zero`
 * and `dump` (the markers of its instruction count under callgrind) and `allocations-start` and
 * `allocations-stop` (V8's sampling heap profiler, collected objects included).
 */
import { Session } from 'node:inspector/promises';
import { getPriority, loadavg } from 'node:os';
import { CONTENDERS, type ContenderConfig } from './contenders.js';

type Command =
  | { id: number; cmd: 'stats'; prefix: string }
  | {
      id: number;
      cmd: 'analyze' | 'rss' | 'close' | 'zero' | 'dump' | 'allocations-start' | 'allocations-stop';
    };

interface SampledNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: SampledNode[];
}

/** Bytes allocated while sampling, per function (by name, file and line), largest first. */
function allocatedByFunction(head: SampledNode): { total: number; top: Array<[string, number]> } {
  const by = new Map<string, number>();
  let total = 0;
  const walk = (node: SampledNode) => {
    const { functionName, url, lineNumber } = node.callFrame;
    const where = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(node_modules|bench-build)\//, '')}:${lineNumber + 1}`;
    by.set(where, (by.get(where) ?? 0) + node.selfSize);
    total += node.selfSize;
    for (const child of node.children) walk(child);
  };
  walk(head);
  return { total, top: [...by].sort((a, b) => b[1] - a[1]).slice(0, 25) };
}
let inspector: Session | undefined;

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
      case 'allocations-start':
        inspector = new Session();
        inspector.connect();
        // Every 512 bytes on average, and objects the collector has freed since are kept: the
        // bytes a delivery allocates, not what it leaves behind.
        await inspector.post('HeapProfiler.startSampling', {
          samplingInterval: 512,
          includeObjectsCollectedByMajorGC: true,
          includeObjectsCollectedByMinorGC: true,
        });
        process.send!({ id: m.id, value: null });
        break;
      case 'allocations-stop': {
        const { profile } = (await inspector!.post('HeapProfiler.stopSampling')) as {
          profile: { head: SampledNode };
        };
        inspector!.disconnect();
        process.send!({ id: m.id, value: allocatedByFunction(profile.head) });
        break;
      }
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
