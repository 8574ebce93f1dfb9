import type { DatabaseInput } from '../db/database.js';
import { InboxOptionsError } from '../errors.js';
import { bool, describe, headerName, IDENTIFIER, integer } from '../options/option-checks.js';
import { decodeSecret } from './signature.js';

export interface BreakerOptions {
  /** Consecutive failures that open the breaker. @defaultValue 10 */
  failureThreshold?: number;
  /** How long an open breaker sends nothing before one probe. @defaultValue 30000 */
  cooldownMs?: number;
}

export interface SenderOptions {
  /** The consumer's http(s) URL; every event is POSTed there. */
  endpoint: string | URL;
  /** Deliveries in flight at once, each for a different key. @defaultValue 16 */
  concurrency?: number;
  /** One attempt's deadline; then it is retried. @defaultValue 10000 */
  timeoutMs?: number;
  /** How long an event is retried from its first attempt, then dead-lettered (`expired`). @defaultValue 86400000 */
  retryForMs?: number;
  /** Also dead-letter after this many failed attempts ("later" answers and probes do not count). @defaultValue no limit */
  maxAttempts?: number;
  /** First backoff window: after the n-th failure, wait random [0, min(capMs, baseMs·2^(n−1))). @defaultValue 500 */
  baseMs?: number;
  /** Largest backoff window. @defaultValue 3600000 (1 h) */
  capMs?: number;
  /** Longest `Retry-After` honoured; a longer one is clamped to this. @defaultValue 3600000 (1 h) */
  maxRetryAfterMs?: number;
  /** How long a delivered event is remembered (an id enqueued again within it is stored once). @defaultValue 604800000 */
  retentionMs?: number;
  /** Memory store only: at most this many delivered ids remembered, the oldest forgotten first. @defaultValue 100000 */
  rememberIds?: number;
  /** Circuit breaker for the endpoint, or `false` for none. */
  breaker?: BreakerOptions | false;
  /** A Standard Webhooks secret (`whsec_…`), or several during a rotation (one signature each). */
  secret?: string | readonly string[];
  /** Header names. @defaultValue Idempotency-Key, X-Key, X-Seq */
  headers?: { id?: string; key?: string; seq?: string };
  /** A Postgres outbox instead of memory (connection string, `pg.Pool`, Kysely or PGlite): events survive a restart. */
  db?: DatabaseInput;
  /** Schema of the outbox tables. @defaultValue 'webhook_outbox' */
  schema?: string;
  /** Run the outbox migrations on first use. @defaultValue true */
  migrate?: boolean;
  /** Pool size when `db` is a connection string. @defaultValue 4 */
  poolSize?: number;
  /** How often the dispatcher looks for work others enqueued (outbox only). @defaultValue 500 */
  pollIntervalMs?: number;
  /** How long a claimed event is leased to this sender (then it may be claimed again); must exceed `timeoutMs`. @defaultValue timeoutMs + 30000 */
  leaseMs?: number;
  /** Deliver from this process. `false` makes an enqueue-only sender (a producer). @defaultValue true */
  dispatch?: boolean;
  /** Random source in [0, 1) for the jitter (tests inject one). @defaultValue Math.random */
  random?: () => number;
}

/** Every option checked and defaulted; `secret` is decoded into `secretKeys`. */
export interface ResolvedSenderOptions
  extends Readonly<
    Required<Omit<SenderOptions, 'endpoint' | 'maxAttempts' | 'breaker' | 'secret' | 'headers' | 'db'>>
  > {
  readonly endpoint: URL;
  readonly maxAttempts: number | undefined;
  readonly breaker: { readonly failureThreshold: number; readonly cooldownMs: number } | false;
  readonly secretKeys: readonly Buffer[];
  readonly headers: { readonly id: string; readonly key: string; readonly seq: string };
  readonly db: DatabaseInput | undefined;
}

const KNOWN = new Set(
  `endpoint concurrency timeoutMs retryForMs maxAttempts retentionMs rememberIds baseMs capMs maxRetryAfterMs
   breaker secret headers db schema migrate poolSize pollIntervalMs leaseMs dispatch random`.split(/\s+/),
);

function fail(option: string, message: string): never {
  throw new InboxOptionsError(option, message);
}

export function resolveSenderOptions(input: SenderOptions): ResolvedSenderOptions {
  if (!input || typeof input !== 'object') fail('options', 'must be an object');
  const o = input as unknown as Record<string, unknown>;
  for (const name of Object.keys(o)) {
    if (!KNOWN.has(name) && o[name] !== undefined) fail(name, 'is not a sender option');
  }
  let endpoint: URL;
  try {
    if (typeof o.endpoint !== 'string' && !(o.endpoint instanceof URL)) throw new Error();
    endpoint = new URL(String(o.endpoint));
  } catch {
    fail('endpoint', `must be an http(s) URL; got ${describe(o.endpoint)}`);
  }
  if (endpoint.protocol !== 'http:' && endpoint.protocol !== 'https:') {
    fail('endpoint', `must be an http(s) URL; got ${describe(String(o.endpoint))}`);
  }
  const timeoutMs = integer(o, 'timeoutMs', 10_000, 1, 3_600_000);
  const baseMs = integer(o, 'baseMs', 500, 1, 3_600_000);
  const capMs = integer(o, 'capMs', 3_600_000, 1, 86_400_000);
  if (capMs < baseMs) fail('capMs', `must be at least \`baseMs\` (${baseMs}); got ${capMs}`);
  let breaker: ResolvedSenderOptions['breaker'] = { failureThreshold: 10, cooldownMs: 30_000 };
  if (o.breaker === false) breaker = false;
  else if (o.breaker !== undefined) {
    if (typeof o.breaker !== 'object' || o.breaker === null || Array.isArray(o.breaker)) {
      fail('breaker', `must be an object or false; got ${describe(o.breaker)}`);
    }
    const b = o.breaker as Record<string, unknown>;
    for (const name of Object.keys(b)) {
      if (name !== 'failureThreshold' && name !== 'cooldownMs')
        fail(`breaker.${name}`, 'is not a breaker option');
    }
    breaker = {
      failureThreshold: integer(b, 'failureThreshold', 10, 1, 1_000_000, 'breaker.failureThreshold'),
      cooldownMs: integer(b, 'cooldownMs', 30_000, 1, 86_400_000, 'breaker.cooldownMs'),
    };
  }
  const secretKeys: Buffer[] = [];
  if (o.secret !== undefined) {
    const list = Array.isArray(o.secret) ? (o.secret as unknown[]) : [o.secret];
    if (list.length === 0) fail('secret', 'must name at least one secret');
    for (const secret of list) {
      if (typeof secret !== 'string') {
        fail('secret', `must be a "whsec_…" string or a list of them; got ${describe(secret)}`);
      }
      try {
        secretKeys.push(decodeSecret(secret));
      } catch (err) {
        // Never echo the secret itself.
        fail('secret', (err as Error).message);
      }
    }
  }
  const h = o.headers ?? {};
  if (typeof h !== 'object' || h === null || Array.isArray(h)) fail('headers', 'must be an object');
  const hh = h as Record<string, unknown>;
  const headers = {
    id: headerName(hh.id, 'headers.id', 'idempotency-key'),
    key: headerName(hh.key, 'headers.key', 'x-key'),
    seq: headerName(hh.seq, 'headers.seq', 'x-seq'),
  };
  if (new Set(Object.values(headers)).size !== 3) fail('headers', 'must name three different headers');
  const schema = o.schema ?? 'webhook_outbox';
  if (typeof schema !== 'string' || !IDENTIFIER.test(schema)) {
    fail('schema', `must be a lower-case SQL identifier (a-z, 0-9, _; at most 40); got ${describe(schema)}`);
  }
  const db = o.db as DatabaseInput | undefined;
  if (db !== undefined && (db === null || (typeof db !== 'string' && typeof db !== 'object'))) {
    fail(
      'db',
      `must be a connection string, a pg.Pool, a Kysely instance or a PGlite instance; got ${describe(db)}`,
    );
  }
  if (db === undefined) {
    for (const name of ['schema', 'migrate', 'poolSize', 'pollIntervalMs']) {
      if (o[name] !== undefined) fail(name, 'applies to the Postgres outbox only; set `db` or remove it');
    }
  } else if (o.rememberIds !== undefined) {
    fail('rememberIds', 'applies to the memory store only (the outbox remembers ids for `retentionMs`)');
  }
  const leaseMs = integer(o, 'leaseMs', timeoutMs + 30_000, 1, 7 * 86_400_000);
  if (leaseMs <= timeoutMs)
    fail('leaseMs', `must be longer than \`timeoutMs\` (${timeoutMs}); got ${leaseMs}`);
  if (o.random !== undefined && typeof o.random !== 'function') {
    fail('random', `must be a function returning a number in [0, 1); got ${describe(o.random)}`);
  }
  return {
    endpoint,
    concurrency: integer(o, 'concurrency', 16, 1, 10_000),
    timeoutMs,
    retryForMs: integer(o, 'retryForMs', 86_400_000, 0, 30 * 86_400_000),
    maxAttempts: o.maxAttempts === undefined ? undefined : integer(o, 'maxAttempts', 0, 1, 1_000_000),
    baseMs,
    capMs,
    maxRetryAfterMs: integer(o, 'maxRetryAfterMs', 3_600_000, 0, 7 * 86_400_000),
    retentionMs: integer(o, 'retentionMs', 7 * 86_400_000, 0, 365 * 86_400_000),
    rememberIds: integer(o, 'rememberIds', 100_000, 0, 100_000_000),
    breaker,
    secretKeys,
    headers,
    db,
    schema,
    migrate: bool(o, 'migrate', true),
    poolSize: integer(o, 'poolSize', 4, 1, 1000),
    pollIntervalMs: integer(o, 'pollIntervalMs', 500, 1, 3_600_000),
    leaseMs,
    dispatch: bool(o, 'dispatch', true),
    random: (o.random as () => number) ?? Math.random,
  };
}
