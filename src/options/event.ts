import type { Transaction } from 'kysely';

/** One event, as the handler sees it. */
export interface InboxEvent<TBody = any> {
  /** The idempotency key: stable across the sender's retries. */
  readonly id: string;
  readonly source: string;
  /** The ordering key, or null for an unordered event. */
  readonly key: string | null;
  /** The event's place in its key's sequence, or null for an unordered event. */
  readonly seq: number | null;
  /** The provider's type (`invoice.paid`), or from `fields.type`: what `handlers` route by. */
  readonly type: string | null;
  /** Parsed JSON, or the raw bytes when the body is not JSON (see option `parse`). */
  readonly body: TBody;
  /** The exact bytes received: what signatures and the body hash were computed over. */
  readonly rawBody: Buffer;
  /** Lower-case names. A stored event (held, pending, retried) has no secret header: they are never stored. */
  readonly headers: Readonly<Record<string, string>>;
  /** 1 on the first run; higher when earlier runs failed. */
  readonly attempt: number;
  readonly receivedAt: Date;
}

/** What a handler gets beside its event. `DB` types `tx` (your Kysely database interface). */
export interface HandlerContext<DB = any> {
  /** The transaction that claimed the event: the side effect commits with the dedup record, or neither. */
  readonly tx: Transaction<DB>;
  /** Aborted when the handler runs past `handlerTimeoutMs`: pass it to `fetch` and the like. */
  readonly signal: AbortSignal;
  /**
   * A key for an outbound call (`name` tells calls apart), the same on every run of this event.
   *
   * ```ts
   * await stripe.refunds.create({ charge }, { idempotencyKey: ctx.idempotencyKey('refund') });
   * ```
   */
  idempotencyKey(name?: string): string;
}

/** Applies one event. `TBody` types `event.body`, `DB` types `context.tx`. */
export type Handler<TBody = any, TResult = unknown, DB = any> = (
  event: InboxEvent<TBody>,
  context: HandlerContext<DB>,
) => TResult | Promise<TResult>;
