export type { DropMode, FaultProxy, FaultProxyOptions, FaultRates, FaultStats } from './fault-proxy.js';
export { createFaultProxy, FaultKind } from './fault-proxy.js';
export { seededRandom } from './random.js';
