/** A delivery's group (`groups.by`) and inline mode's per-group cap; an unreadable one is stored as none. */
import type { ParsedDelivery } from '../delivery/delivery.js';
import { fieldDelivery, readSource } from '../delivery/field-source.js';
import type { Outcome } from '../outcome.js';
import type { Runtime } from '../runtime/runtime.js';
import * as respond from './respond.js';

const MAX_GROUP_CHARACTERS = 255;

/** '' when the delivery names none, or its group cannot be read. */
export function groupOf(rt: Runtime, d: ParsedDelivery): string {
  const groups = rt.options.groups!;
  let value: unknown;
  try {
    value = readSource(groups.by, fieldDelivery(d.headers, d.rawBody, d.body));
  } catch (err) {
    return unreadable(rt, d, `groups.by threw: ${err instanceof Error ? err.message : String(err)}`, err);
  }
  if (value === undefined || value === '') return '';
  const fromFunction = groups.by.kind === 'function';
  const text =
    typeof value === 'number' && !fromFunction && Number.isSafeInteger(value) ? String(value) : value;
  if (typeof text !== 'string')
    return unreadable(
      rt,
      d,
      `groups.by must give a string${fromFunction ? '' : ' or an integer'}; got ${typeof value}`,
    );
  if (text.length > MAX_GROUP_CHARACTERS || /[\x00-\x1f\x7f]/.test(text))
    return unreadable(
      rt,
      d,
      `groups.by must give at most ${MAX_GROUP_CHARACTERS} characters and no control characters`,
    );
  return text;
}

function unreadable(rt: Runtime, d: ParsedDelivery, message: string, err?: unknown): string {
  rt.metrics.groupUnreadable();
  rt.options.logger.error(
    { err, id: d.id, source: rt.options.source },
    `webhook-inbox: ${message}; the event is stored without a group`,
  );
  return '';
}

const inFlight = new WeakMap<Runtime, Map<string, number>>();

/** Inline mode: past `groups.inFlight` of its group on this instance, 429 + Retry-After; nothing stored. */
export async function withinGroupCap(
  rt: Runtime,
  group: string,
  run: () => Promise<Outcome>,
): Promise<Outcome> {
  const cap = rt.options.groups?.inFlight;
  if (!cap || group === '' || rt.options.mode === 'deferred') return run();
  const counts = inFlight.get(rt) ?? new Map<string, number>();
  inFlight.set(rt, counts);
  const n = counts.get(group) ?? 0;
  if (n >= cap) return respond.groupBusy(cap);
  counts.set(group, n + 1);
  try {
    return await run();
  } finally {
    const left = (counts.get(group) ?? 1) - 1;
    if (left === 0) counts.delete(group);
    else counts.set(group, left);
  }
}
