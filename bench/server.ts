/**
 * One contender in its own process (forkServer in bench/server-process.ts). argv[2] is the JSON
 * ContenderConfig; it sends `ready` with the port, then answers `stats`, `analyze`, `rss`, `close`.
 */
import { CONTENDERS, type ContenderConfig } from './contenders.js';

type Command =
  | { id: number; cmd: 'stats'; prefix: string }
  | { id: number; cmd: 'analyze' | 'rss' | 'close' };

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
