/**
 * The ingest contract's load: `senders` concurrent senders, each posting a payload with a
 * random `sequence_id` in 1..10^6 (`idempotency_key` `test-<seq>`) to `POST /webhooks/ingest`
 * every 100 ms, for `seconds`. Shared by the contract test (test/ledger-ingest-contract.test.ts)
 * and the benchmark (bench/ingest-load.ts), so that both send the same thing.
 */
import { seededRandom } from '../../src/testing/random.js';

/** One answer, with its sequence id and how long it took (ms, from send to the last byte). */
export interface IngestAnswer {
  readonly seq: number;
  readonly status: number;
  readonly body: { status?: string; reason?: string; [member: string]: unknown };
  readonly ms: number;
}

export interface IngestLoadReport {
  readonly answers: IngestAnswer[];
  /** Answered 202 with status buffered or processed. */
  readonly accepted: number;
  /** Answered 200 dead-lettered, reason late: its seq was skipped by a gap timeout first. */
  readonly late: number;
  /** Any other answer (the contract wants none). */
  readonly other: number;
  /** Posts of a seq already posted (same seq, same key, same body: a duplicate). */
  readonly collisions: number;
  readonly p50: number;
  readonly p95: number;
}

// A small deterministic generator, so that a run can be replayed (the chaos suite's).
export { seededRandom } from '../../src/testing/random.js';

/**
 * A full v2 payload, the same for the same seq (its timestamp is derived from it): two senders
 * that draw one seq send the same event, a true collision.
 */
export function loadPayload(seq: number) {
  return {
    sequence_id: seq,
    idempotency_key: `test-${seq}`,
    event_type: 'ledger.credit',
    timestamp: new Date(Date.UTC(2026, 0, 1) + seq * 1000).toISOString(),
    payload_version: 'v2',
    data: { amount: 1 + (seq % 100) },
  };
}

export function isAccepted(a: Pick<IngestAnswer, 'status' | 'body'>): boolean {
  return a.status === 202 && (a.body.status === 'buffered' || a.body.status === 'processed');
}

export function isLate(a: Pick<IngestAnswer, 'status' | 'body'>): boolean {
  return a.status === 200 && a.body.status === 'dead-lettered' && a.body.reason === 'late';
}

/** The value below which `share` of the sorted `values` lie. */
function percentile(sorted: number[], share: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * share))];
}

/** Runs the load against the ledger at `url` and reports every answer. */
export async function runIngestLoad(options: {
  url: string;
  seconds: number;
  senders?: number;
  intervalMs?: number;
  seed?: number;
}): Promise<IngestLoadReport> {
  const senders = options.senders ?? 50;
  const intervalMs = options.intervalMs ?? 100;
  const rand = seededRandom(options.seed ?? 1_000_000);
  const answers: IngestAnswer[] = [];
  const posted = new Set<number>();
  let collisions = 0;
  const end = Date.now() + options.seconds * 1000;
  await Promise.all(
    Array.from({ length: senders }, async () => {
      while (Date.now() < end) {
        const tick = Date.now();
        const seq = 1 + Math.floor(rand() * 1_000_000);
        if (posted.has(seq)) collisions++;
        posted.add(seq);
        const started = performance.now();
        const res = await fetch(`${options.url}/webhooks/ingest`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(loadPayload(seq)),
        });
        const text = await res.text();
        let body: IngestAnswer['body'];
        try {
          body = JSON.parse(text);
        } catch {
          body = { text };
        }
        answers.push({ seq, status: res.status, body, ms: performance.now() - started });
        // Pacing: one post per sender every intervalMs (a slower answer delays the next post).
        const rest = intervalMs - (Date.now() - tick);
        if (rest > 0) await new Promise((resolve) => setTimeout(resolve, rest));
      }
    }),
  );
  const latencies = answers.map((a) => a.ms).sort((a, b) => a - b);
  const accepted = answers.filter(isAccepted).length;
  const late = answers.filter(isLate).length;
  return {
    answers,
    accepted,
    late,
    other: answers.length - accepted - late,
    collisions,
    p50: percentile(latencies, 0.5),
    p95: percentile(latencies, 0.95),
  };
}
