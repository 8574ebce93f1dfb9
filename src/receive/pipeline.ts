/** One delivery's path: shed → read → verify → parse → memory → look first → claim → apply → respond. */
import type { Background } from '../background/background.js';
import { type ParsedDelivery, parseDelivery } from '../delivery/delivery.js';
import { parseBody } from '../delivery/payload.js';
import type { Delivery } from '../delivery/request.js';
import { type VerifiedDelivery, verifyDelivery } from '../delivery/verify.js';
import { InvalidDeliveryError } from '../errors.js';
import { inActiveSpan, parentOf, recordError } from '../observability/tracing.js';
import { type Outcome, OutcomeKind } from '../outcome.js';
import type { Runtime } from '../runtime/runtime.js';
import { admitted } from './admission.js';
import { claimAndApply } from './claim.js';
import { groupOf, withinGroupCap } from './groups.js';
import { fromProcessed, lookFirst } from './look-first.js';
import { type Observation, observed } from './observe.js';
import { type BodyStream, startBodyRead } from './raw-body.js';
import * as respond from './respond.js';

/** A delivery whose body is a stream: a sender that sends nothing yet holds no in-flight slot. */
export async function receiveStream(
  rt: Runtime,
  bg: Background,
  headers: Delivery['headers'],
  stream: BodyStream,
): Promise<Outcome> {
  const length = headers['content-length'];
  const reading = startBodyRead(stream, {
    maxBytes: rt.options.maxBodyBytes,
    timeoutMs: rt.options.bodyTimeoutMs,
    declaredLength: typeof length === 'string' ? length : length?.[0],
  });
  await reading.started;
  return admitted(rt, async () => {
    let rawBody: Buffer;
    try {
      rawBody = await reading.body;
    } catch (err) {
      if (err instanceof InvalidDeliveryError)
        return observed(rt, undefined, { parent: undefined }, respond.invalid(err));
      throw err;
    }
    return traced(rt, bg, { headers, rawBody });
  });
}

/** Never throws for a bad delivery. */
export function receive(rt: Runtime, bg: Background, delivery: Delivery): Promise<Outcome> {
  return admitted(rt, () => traced(rt, bg, delivery));
}

function traced(rt: Runtime, bg: Background, delivery: Delivery): Promise<Outcome> {
  return inActiveSpan(rt.tracer, 'webhook-inbox.receive', async (span) => {
    const obs: Observation = { parent: parentOf(span) };
    try {
      return observed(rt, span, obs, await decide(rt, bg, delivery, obs));
    } catch (err) {
      recordError(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

async function decide(rt: Runtime, bg: Background, delivery: Delivery, obs: Observation): Promise<Outcome> {
  const o = rt.options;
  let verified: VerifiedDelivery | undefined;
  if (o.verify) {
    try {
      verified = await verifyDelivery(o.verify, delivery);
    } catch (err) {
      return respond.unverified(o, err);
    }
  }
  // Without a `respond` hook or `bodySchema`, a cached answer needs no body (processed-cache.ts).
  const bodyLater = !o.bodySchema && !o.respond;
  let d: ParsedDelivery;
  try {
    d = parseDelivery(delivery, o, verified?.id, bodyLater ? rt.processed : undefined);
    if (o.bodySchema) d = { ...d, body: await o.bodySchema.check(d.body) };
  } catch (err) {
    if (err instanceof InvalidDeliveryError) return respond.invalid(err);
    throw err;
  }
  obs.parsed = d;
  const cached = rt.processed.duplicateOf(d.id, d.hash, d.key, d.seq);
  if (cached) {
    if (bodyLater && d.body !== undefined && !Buffer.isBuffer(d.body)) rt.processed.noteBodyParses(cached);
    obs.answeredBy = 'memory';
    return respond.duplicate(d.id, cached.result); // zero round trips: see processed-cache.ts
  }
  if (d.body === undefined) {
    d = { ...d, body: parseBody(d.rawBody, d.headers['content-type'], o.parse) };
    obs.parsed = d;
  }
  try {
    await rt.open();
    bg.start();
  } catch (err) {
    respond.databaseFailed(o, err);
    return respond.unavailable();
  }
  if (rt.duplicateOdds.likely) {
    // A retry storm: look before any transaction (duplicate-odds.ts).
    const found = await lookFirst(rt, d.id);
    if (found) {
      obs.answeredBy = rt.redis ? 'redis' : 'postgres';
      rt.duplicateOdds.note(true);
      return fromProcessed(rt, d, found);
    }
  }
  if (bg.sheddingPending && rt.pendingEstimate >= o.maxPending) return respond.shed('pending');
  obs.answeredBy = 'postgres';
  if (o.groups) d = { ...d, group: groupOf(rt, d) };
  const parsed = d;
  const outcome = await withinGroupCap(rt, d.group ?? '', () => claimAndApply(rt, bg, parsed, obs));
  if (outcome.kind !== OutcomeKind.unavailable) respond.databaseAnswered(o);
  return outcome;
}
