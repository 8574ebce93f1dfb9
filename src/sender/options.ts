import type { DatabaseInput } from '../database.js';
import { InboxOptionsError } from '../errors.js';
import { decodeSecret } from './signature.js';

export interface BreakerOptions {
  /** Consecutive failures (network error, timeout, 5xx, 408, 429) that open the breaker. @defaultValue 10 */
  failureThreshold?: number;
  /** How long an open breaker sends nothing before one probe. @defaultValue 30000 */
  cooldownMs?: number;
}

export interface SenderOptions {
  /** The consumer's URL (http or https). Every event is POSTed there. */
  endpoint: string | URL;
  /** Deliveries in flight at once, each for a different key. @defaultValue 16 */
  concurrency?: number;
  /** One attempt's deadline (connect, headers and body); then it is retried. @defaultValue 10000 */
  timeoutMs?: number;
  /** Attempts before an event is dead-lettered (its key then waits for `retry` or `skip`). @defaultValue 8 */
  maxAttempts?: number;
  /** First backoff window: after the n-th failure, wait random [0, min(capMs, baseMs·2^(n−1))). @defaultValue 500 */
  baseMs?: number;
  /** Largest backoff window. @defaultValue 60000 */
  capMs?: number;
  /** Longest `Retry-After` honoured; a longer one is clamped to this. @defaultValue 600000 */
  maxRetryAfterMs?: number;
  /** Circuit breaker for the endpoint, or `false` for none. */
  breaker?: BreakerOptions | false;
  /** A Standard Webhooks secret (`whsec_…`): every attempt is signed with it. */
  secret?: string;
  /** Header names. @defaultValue Idempotency-Key, X-Key, X-Seq */
  headers?: { id?: string; key?: string; seq?: string };
  /**
   * A Postgres outbox instead of memory: a connection string, a `pg.Pool`, a Kysely instance or
   * a PGlite instance. Events survive a restart; `enqueue(tx, event)` joins a producer's transaction.
   */
  db?: DatabaseInput;
  /** Schema of the outbox tables. @defaultValue 'webhook_outbox' */
  schema?: string;
  /** Run the outbox migrations on first use. @defaultValue true */
  migrate?: boolean;
  /** Pool size when `db` is a connection string. @defaultValue 4 */
  poolSize?: number;
  /** How often the dispatcher looks for work others enqueued (outbox only). @defaultValue 500 */
  pollIntervalMs?: number;
  /** How long a claimed outbox event is leased to this sender; must exceed `timeoutMs`. @defaultValue timeoutMs + 30000 */
  leaseMs?: number;
  /** Deliver from this process. `false` makes an enqueue-only sender (a producer). @defaultValue true */
  dispatch?: boolean;
  /** Random source in [0, 1) for the jitter (tests inject one). @defaultValue Math.random */
  random?: () => number;
}

export interface ResolvedSenderOptions {
  readonly endpoint: URL;
  readonly concurrency: number;
  readonly timeoutMs: number;
  readonly maxAttempts: number;
  readonly baseMs: number;
  readonly capMs: number;
  readonly maxRetryAfterMs: number;
  readonly breaker: { readonly failureThreshold: number; readonly cooldownMs: number } | false;
  readonly secretKey: Buffer | undefined;
  readonly headers: { readonly id: string; readonly key: string; readonly seq: string };
  readonly db: DatabaseInput | undefined;
  readonly schema: string;
  readonly migrate: boolean;
  readonly poolSize: number;
  readonly pollIntervalMs: number;
  readonly leaseMs: number;
  readonly dispatch: boolean;
  readonly random: () => number;
}

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,39}$/;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;
const KNOWN = new Set([
  'endpoint',
  'concurrency',
  'timeoutMs',
  'maxAttempts',
  'baseMs',
  'capMs',
  'maxRetryAfterMs',
  'breaker',
  'secret',
  'headers',
  'db',
  'schema',
  'migrate',
  'poolSize',
  'pollIntervalMs',
  'leaseMs',
  'dispatch',
  'random',
]);

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value);
  if (typeof value === 'function') return 'a function';
  if (value === null) return 'null';
  if (typeof value === 'object') return Array.isArray(value) ? 'an array' : 'an object';
  return String(value);
}

function fail(option: string, message: string): never {
  throw new InboxOptionsError(option, message);
}

function integer(
  o: Record<string, unknown>,
  name: string,
  fallback: number,
  min: number,
  max: number,
  label = name,
): number {
  const value = o[name];
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    fail(label, `must be an integer from ${min} to ${max}; got ${describe(value)}`);
  }
  return value;
}

function bool(o: Record<string, unknown>, name: string, fallback: boolean): boolean {
  const value = o[name];
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') fail(name, `must be a boolean; got ${describe(value)}`);
  return value;
}

function headerName(value: unknown, name: string, fallback: string): string {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !HEADER_NAME.test(value.toLowerCase())) {
    fail(name, `must be an HTTP header name; got ${describe(value)}`);
  }
  return value.toLowerCase();
}

/** Every sender option, checked and defaulted in one place. A bad value throws, naming the option. */
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
  const capMs = integer(o, 'capMs', 60_000, 1, 86_400_000);
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
  let secretKey: Buffer | undefined;
  if (o.secret !== undefined) {
    if (typeof o.secret !== 'string') fail('secret', `must be a "whsec_…" string; got ${describe(o.secret)}`);
    try {
      secretKey = decodeSecret(o.secret);
    } catch (err) {
      // Never echo the secret itself.
      fail('secret', (err as Error).message);
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
    for (const name of ['schema', 'migrate', 'poolSize', 'pollIntervalMs', 'leaseMs']) {
      if (o[name] !== undefined) fail(name, 'applies to the Postgres outbox only; set `db` or remove it');
    }
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
    maxAttempts: integer(o, 'maxAttempts', 8, 1, 1000),
    baseMs,
    capMs,
    maxRetryAfterMs: integer(o, 'maxRetryAfterMs', 600_000, 0, 7 * 86_400_000),
    breaker,
    secretKey,
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
