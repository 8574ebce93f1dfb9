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
  /**
   * The event's type, where the provider puts it (`invoice.paid`, `issues.opened`), or from
   * `fields.type`; null when it has none. `handlers` route by it.
   */
  readonly type: string | null;
  /** Parsed JSON, or the raw bytes when the body is not JSON (see option `parse`). */
  readonly body: TBody;
  /** The exact bytes received: what signatures and the body hash were computed over. */
  readonly rawBody: Buffer;
  /**
   * Request headers, lower-case names. A stored event (held, pending, retried) has no secret
   * header (`authorization`, the verifier's token or signature, `secretHeaders`): they are never stored.
   */
  readonly headers: Readonly<Record<string, string>>;
  /** 1 on the first run; higher when earlier runs failed. */
  readonly attempt: number;
  readonly receivedAt: Date;
}

/** What the handler gets besides the event. */
/**
 * What a handler gets beside its event. `DB` types `tx` (your Kysely database interface, e.g.
 * `kysely-codegen` output): `createInbox<DB, Body>(…)` passes it through.
 */
export interface HandlerContext<DB = any> {
  /**
   * The transaction that claimed the event. Write the side effect through it: it commits
   * with the dedup record, or neither happens.
   */
  readonly tx: Transaction<DB>;
  /**
   * Aborted when the handler runs past `handlerTimeoutMs`: its transaction is then rolled back
   * and the attempt counted. Pass it to `fetch` and other calls that accept one.
   */
  readonly signal: AbortSignal;
  /**
   * A stable key for an outbound call this handler makes (`name` tells calls apart), derived
   * from source, event id and name: the same on every run of this event. Send it as the
   * `Idempotency-Key` of APIs that accept one, so a re-run does not charge twice.
   *
   * ```ts
   * await stripe.refunds.create({ charge }, { idempotencyKey: ctx.idempotencyKey('refund') });
   * ```
   */
  idempotencyKey(name?: string): string;
}

/**
 * Applies one event. `TBody` types `event.body`, `DB` types `context.tx` (a Kysely
 * `Transaction<DB>`).
 */
export type Handler<TBody = any, TResult = unknown, DB = any> = (
  event: InboxEvent<TBody>,
  context: HandlerContext<DB>,
) => TResult | Promise<TResult>;
