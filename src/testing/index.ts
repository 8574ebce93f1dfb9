export type { DropMode, FaultProxy, FaultProxyOptions, FaultRates, FaultStats } from './fault-proxy.js';
export { createFaultProxy, FaultKind } from './fault-proxy.js';
export type { InvariantsDatabase, InvariantsTables, InvariantViolation } from './invariants.js';
export { assertInvariants, checkInvariants, InvariantsError } from './invariants.js';
export { seededRandom } from './random.js';
export type { PresetName, SignedDelivery, SignedDeliveryOptions, SignedProvider } from './signed-delivery.js';
export { signedDelivery } from './signed-delivery.js';
