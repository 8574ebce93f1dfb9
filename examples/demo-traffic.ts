/**
 * The demo's traffic side, in a worker thread: the fault proxy and the sender. The main
 * thread keeps the ledger and its embedded database (one PGlite session is the bottleneck);
 * this way the HTTP client and the proxy use the machine's other core instead of queueing
 * behind it.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { createSender, type SenderStats } from '../src/sender/index.js';
import { createFaultProxy, type FaultRates, type FaultStats, seededRandom } from '../src/testing/index.js';

export interface TrafficInput {
  target: string;
  seed: number;
  rates: FaultRates;
  concurrency: number;
  plan: Array<{ id: string; key: string; amount: number }>;
}

export interface TrafficSnapshot {
  sender: SenderStats;
  proxy: FaultStats;
  deadLetters: number;
}

export type TrafficMessage =
  | ({ type: 'progress' } & TrafficSnapshot)
  | ({ type: 'done'; results: Array<{ id: string; seq: number | null; status: string }> } & TrafficSnapshot);

const input = workerData as TrafficInput;
const port = parentPort!;
const proxy = await createFaultProxy({
  target: input.target,
  seed: input.seed,
  rates: input.rates,
  maxDelayMs: 50,
  holdMs: 5000,
});
const sender = createSender({
  endpoint: `${proxy.url}/webhooks`,
  concurrency: input.concurrency,
  timeoutMs: 3000,
  baseMs: 10,
  capMs: 500,
  maxAttempts: 50,
  breaker: { failureThreshold: 30, cooldownMs: 200 },
  random: seededRandom(input.seed ^ 0x5eed),
});
let deadLetters = 0;
sender.on('dead-lettered', () => deadLetters++);
const snapshot = (): TrafficSnapshot => ({ sender: sender.stats(), proxy: proxy.stats(), deadLetters });
const ticker = setInterval(
  () => port.postMessage({ type: 'progress', ...snapshot() } satisfies TrafficMessage),
  100,
);
const results = await Promise.all(
  input.plan.map((e) => sender.send({ id: e.id, key: e.key, body: { amount: e.amount } })),
);
// Duplicate copies may still be on the wire.
await proxy.idle();
clearInterval(ticker);
port.postMessage({
  type: 'done',
  ...snapshot(),
  results: results.map((r) => ({ id: r.id, seq: r.seq, status: r.status })),
} satisfies TrafficMessage);
await sender.close();
await proxy.close();
