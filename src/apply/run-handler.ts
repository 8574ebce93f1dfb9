import type { Context } from '@opentelemetry/api';
import type { Transaction } from 'kysely';
import type { TakenEvent } from '../db/sql/taken-event.js';
import { storedTypeOf } from '../delivery/field-source.js';
import { parseBody } from '../delivery/payload.js';
import { HandlerError } from '../errors.js';
import { inSpan } from '../observability/tracing.js';
import type { InboxEvent } from '../options/event.js';
import type { Runtime } from '../runtime/runtime.js';
import { runWithContext } from './handler-context.js';

/** A taken event's type: the delivery's, or a stored event's read again. */
export function eventType(rt: Runtime, taken: TakenEvent, body?: unknown): string | null {
  if ('type' in taken) return taken.type ?? null;
  const source = rt.options.fields.type;
  return source ? storedTypeOf(source, taken.headers, taken.payload, body) : null;
}

/** Runs the handler in `tx` (none for its type: ignored); a throw becomes a HandlerError. */
export async function runHandler(
  rt: Runtime,
  tx: Transaction<any>,
  taken: TakenEvent,
  parent: Context | undefined,
): Promise<{
  result: unknown;
  json: string | undefined;
  seconds: number;
  ignored: boolean;
  type: string | null;
}> {
  const o = rt.options;
  const started = performance.now();
  let result: unknown;
  let json: string | undefined;
  let type: string | null;
  try {
    // A stored payload that no longer parses or passes `bodySchema` fails like a handler would.
    const body =
      'body' in taken ? taken.body : parseBody(taken.payload, taken.headers['content-type'], o.parse);
    type = eventType(rt, taken, body);
    const handle = o.handlers(type);
    if (!handle) return { result: undefined, json: undefined, seconds: 0, ignored: true, type };
    const event: InboxEvent = {
      id: taken.id,
      source: o.source,
      key: taken.key,
      seq: taken.seq,
      type,
      body: o.bodySchema && !('body' in taken) ? await o.bodySchema.check(body) : body,
      rawBody: taken.payload,
      headers: taken.headers,
      attempt: taken.attempts + 1,
      receivedAt: taken.receivedAt,
    };
    result = await inSpan(rt.tracer, 'webhook-inbox.handler', parent, () =>
      runWithContext(handle, event, tx, o.handlerTimeoutMs, rt.database.handlerPlugins),
    );
    json = result === undefined ? undefined : JSON.stringify(result);
  } catch (err) {
    rt.metrics.handler((performance.now() - started) / 1000, 'failed');
    throw err instanceof HandlerError ? err : new HandlerError(err);
  }
  return { result, json, seconds: (performance.now() - started) / 1000, ignored: false, type };
}
