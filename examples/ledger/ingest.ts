/**
 * The ingest contract (`POST /webhooks/ingest`, `GET /ledger/verify`): events that carry their
 * id and sequence in the body, one stream for all of them, acknowledged at once (202) and
 * applied in sequence order by the workers. A second inbox beside the ledger's `/webhooks`:
 * its own `source`, the same database and tables. docs/body-sourced-events.md walks through it.
 *
 * The payload (v2): `sequence_id` (integer ≥ 1, strictly monotonic in the stream), and, when
 * present, `idempotency_key` (string), `event_type`, `timestamp` (date-time),
 * `payload_version` (`v<digits>`) and `data` (an object, or a string: minimal payloads carry
 * one). Only `sequence_id` is required.
 */
import { sql } from 'kysely';
import type {
  FieldDelivery,
  Fields,
  Handler,
  Inbox,
  InboxOptions,
  JsonSchema,
  Outcome,
  ResponseShape,
} from '../../src/index.js';
import type { Ledger } from './ledger.js';

/** The one stream every ingested event belongs to: its ordering key and its account. */
export const INGEST_STREAM = 'ingest';
/** The ingest inbox's `source`: its ids never collide with those of `/webhooks`. */
export const INGEST_SOURCE = 'ingest';

/** An ingested event's body, once the schema accepted it. */
export interface IngestPayload {
  sequence_id: number;
  idempotency_key?: string;
  event_type?: 'ledger.credit' | 'ledger.debit' | 'payment.cleared';
  timestamp?: string;
  payload_version?: string;
  data?: Record<string, unknown> | string;
}

/**
 * The v2 contract as a JSON Schema (2020-12), checked by `bodySchema` at the door: a body that
 * fails is 422 naming the field (`body /event_type`), nothing stored. Only `sequence_id` is
 * required: the contract's minimal payloads carry nothing else (and a string `data`), and must
 * be accepted; every other field is checked when present. `data` is an object, or a string.
 * Other members are allowed (a later payload_version may add some).
 */
export const ingestBodySchema: JsonSchema = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  required: ['sequence_id'],
  properties: {
    sequence_id: { type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER },
    // The inbox's rule for an id: 1-255 printable ASCII characters.
    idempotency_key: { type: 'string', pattern: '^[ -~]{1,255}$' },
    event_type: { enum: ['ledger.credit', 'ledger.debit', 'payment.cleared'] },
    timestamp: { type: 'string', format: 'date-time' },
    payload_version: { type: 'string', pattern: '^v\\d+$' },
    data: { type: ['object', 'string'] },
  },
};

/**
 * The body's `sequence_id` when it is one the schema accepts (an integer from 1 to 2^53−1),
 * else undefined. Exactly the schema's rule, so that the two never disagree.
 */
function sequenceOf(body: unknown): number | undefined {
  const seq = (body as { sequence_id?: unknown } | null | undefined)?.sequence_id;
  return typeof seq === 'number' && Number.isSafeInteger(seq) && seq >= 1 ? seq : undefined;
}

/** The inbox's rule for an id, which the schema states for `idempotency_key` too. */
const PRINTABLE_ID = /^[ -~]{1,255}$/;

/**
 * Where the id, key and seq come from. Functions rather than JSON pointers so that a body whose
 * `sequence_id` breaks the contract (0, missing, a string) is refused by the schema (422
 * naming `body /sequence_id`), not by the seq source (400): the inbox reads the fields before
 * it checks `bodySchema`, so these step aside (no key, no seq) and let the schema answer.
 * Nothing is stored either way.
 */
export const ingestFields: Fields = {
  id: (d: FieldDelivery) => {
    const key = (d.body as { idempotency_key?: unknown } | null | undefined)?.idempotency_key;
    if (typeof key === 'string' && PRINTABLE_ID.test(key)) return key;
    // No idempotency_key: the stream and the sequence name the event. A body with a malformed
    // idempotency_key or without a valid sequence_id gets an id all the same, and the schema
    // refuses it (422) before anything is stored.
    return `${INGEST_STREAM}:${sequenceOf(d.body) ?? 'invalid'}`;
  },
  key: (d: FieldDelivery) => (sequenceOf(d.body) === undefined ? undefined : INGEST_STREAM),
  seq: (d: FieldDelivery) => sequenceOf(d.body),
};

/** What an event credits: `data.amount` when it is an integer, otherwise its `sequence_id`. */
export function amountOf(body: IngestPayload): number {
  const data = body.data;
  const amount = typeof data === 'object' && data !== null ? data.amount : undefined;
  return typeof amount === 'number' && Number.isSafeInteger(amount) ? amount : body.sequence_id;
}

/** The handler: credits the stream's account in the event's transaction. */
export function ingestHandler(ledger: Ledger): Handler<IngestPayload> {
  return (event, { tx }) =>
    ledger.credit(tx, event.key ?? INGEST_STREAM, event.id, event.seq, amountOf(event.body));
}

/**
 * The contract's answers: `202 {"status": "buffered"}` for an event stored and waiting (held
 * for an earlier sequence, or pending for a worker), `202 {"status": "processed"}` for one
 * already applied (a redelivery of an applied event: the stored status). Every other outcome
 * keeps the inbox's answer: a late event (its gap skipped by the timeout) is 200
 * `dead-lettered` with reason `late`, a refused body 422 problem+json.
 */
export function ingestAnswer(outcome: Outcome): ResponseShape | undefined {
  switch (outcome.kind) {
    case 'held':
    case 'pending':
      return { status: 202, body: { status: 'buffered' } };
    case 'processed':
    case 'duplicate':
      return { status: 202, body: { status: 'processed' } };
    default:
      return undefined;
  }
}

/**
 * The ingest inbox's options. Deferred mode: ingestion is decoupled from processing, as the
 * contract asks; the request stores the event (one short transaction) and answers 202, and
 * the workers apply the stream in order. The buffer bound lets one stream hold sequence ids
 * spread over 1..10^6 (the load test's): a million held events at most (`maxHeldPerKey`'s
 * ceiling), up to a million past the cursor. `given` overrides any of them (`gapTimeoutMs`).
 */
export function ingestInboxOptions(
  ledger: Ledger,
  given: Omit<InboxOptions, 'handle'> = {},
): InboxOptions<IngestPayload> {
  return {
    source: INGEST_SOURCE,
    mode: 'deferred',
    parse: 'json',
    fields: ingestFields,
    bodySchema: ingestBodySchema,
    respond: ingestAnswer,
    maxHeldPerKey: 1_000_000,
    maxSeqAhead: 1_000_000,
    ...given,
    handle: ingestHandler(ledger),
  };
}

/** GET /ledger/verify's answer. */
export interface Reconciliation {
  /**
   * Every applied sequence was applied once and in increasing order, none inside a skipped
   * gap, and the balance equals the sum of the applied amounts.
   */
  reconciled: boolean;
  /** Events applied (entries of the stream). */
  applied: number;
  /** Events stored and not applied yet (held or pending). */
  buffered: number;
  /** Sequence ids skipped by gap timeouts (or by an operator). */
  skipped: number;
}

/**
 * Reconciles the stream's account with its entries and the inbox's buffer and gaps, in one
 * statement (one snapshot: workers applying meanwhile cannot make it disagree with itself).
 */
export async function reconcile(inbox: Inbox, ledger: Ledger): Promise<Reconciliation> {
  const o = inbox.options;
  const events = sql.table(`${o.schema}.${o.tablePrefix}events`);
  const gaps = sql.table(`${o.schema}.${o.tablePrefix}gaps`);
  const entries = sql.table(`${ledger.schema}.entries`);
  const accounts = sql.table(`${ledger.schema}.accounts`);
  const { rows } = await sql<Record<string, string | null>>`
    with applied as (
      select seq, amount, lag(seq) over (order by n) as previous
        from ${entries} where key = ${INGEST_STREAM}
    ), skipped as (
      select from_seq, to_seq from ${gaps} where source = ${o.source} and key = ${INGEST_STREAM}
    )
    select
      (select count(*) from applied) as applied,
      (select coalesce(sum(amount), 0) from applied) as total,
      (select count(*) from applied where seq is null or seq <= previous) as disordered,
      (select count(*) from applied a
         where exists (select 1 from skipped g where a.seq between g.from_seq and g.to_seq)) as in_gaps,
      (select coalesce(sum(to_seq - from_seq + 1), 0) from skipped) as skipped,
      (select count(*) from ${events}
         where source = ${o.source} and status in ('held', 'pending')) as buffered,
      (select coalesce((select balance from ${accounts} where key = ${INGEST_STREAM}), 0)) as balance
  `.execute(await inbox.kysely());
  const r = rows[0];
  const n = (column: string) => Number(r[column]);
  return {
    reconciled: n('disordered') === 0 && n('in_gaps') === 0 && n('balance') === n('total'),
    applied: n('applied'),
    buffered: n('buffered'),
    skipped: n('skipped'),
  };
}
