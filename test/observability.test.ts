import { trace } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FRAMEWORKS, type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { createInbox, SpanAttributes } from '../src/index.js';
import { postgresTarget, postgresUrl, type TargetDb, targets, uniqueName } from './support/databases.js';
import { getJson, post } from './support/http.js';
import { startTcpProxy } from './support/tcp-proxy.js';

let n = 0;
const uid = (label: string) => `${label}-${process.pid}-${++n}`;

interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error';
  obj: Record<string, unknown>;
  msg: string;
}

function recordingLogger() {
  const lines: LogLine[] = [];
  const at = (level: LogLine['level']) => (obj: object, msg?: string) =>
    lines.push({ level, obj: obj as Record<string, unknown>, msg: msg ?? '' });
  return { lines, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}

async function read(registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name}`);
  const { values } = await metric.get();
  return values
    .filter((v) => Object.entries(labels).every(([k, want]) => v.labels[k] === want))
    .reduce((sum, v) => sum + v.value, 0);
}

describe.each(targets)('metrics, spans, logs and health on $name', (target) => {
  let t: TargetDb;
  let app: LedgerServer;
  let url: string;
  let registry: Registry;
  let exporter: InMemorySpanExporter;
  let log: ReturnType<typeof recordingLogger>;

  beforeAll(async () => {
    t = await target.open();
    registry = new Registry();
    exporter = new InMemorySpanExporter();
    log = recordingLogger();
    app = await startLedger({
      testHooks: true,
      ledgerSchema: t.appSchema,
      inbox: {
        db: t.db,
        schema: t.schema,
        sweepIntervalMs: 0,
        gapTimeoutMs: 1,
        maxAttempts: 1,
        metrics: { registry },
        tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
        logger: log.logger,
      },
    });
    url = `${app.url}/webhooks`;
  });
  afterAll(async () => {
    await app?.close();
    await t?.close();
  });

  const send = (id: string, amount: number, key?: string, seq?: number) =>
    post(url, { amount }, { 'Idempotency-Key': id, ...(key ? { 'X-Key': key, 'X-Seq': String(seq) } : {}) });
  const spans = (name: string) => exporter.getFinishedSpans().filter((s) => s.name === name);
  const childrenOf = (parent: ReadableSpan, name: string) =>
    spans(name).filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId);

  it('counts deliveries by outcome, duplicates by who answered, and times handler and commit', async () => {
    const outcome = (o: string) => read(registry, 'webhook_inbox_deliveries_total', { outcome: o });
    const byMemory = () => read(registry, 'webhook_inbox_duplicates_total', { answered_by: 'memory' });
    const [processed, duplicate, invalid, memory] = [
      await outcome('processed'),
      await outcome('duplicate'),
      await outcome('invalid'),
      await byMemory(),
    ];
    const id = uid('m');
    await send(id, 1);
    await send(id, 1);
    await send(id, 1);
    await post(url, { amount: 1 }, {}); // no Idempotency-Key: 400
    expect(await outcome('processed')).toBe(processed + 1);
    expect(await outcome('duplicate')).toBe(duplicate + 2);
    expect(await outcome('invalid')).toBe(invalid + 1);
    // This instance processed it: both copies are answered from its memory (the LRU).
    expect(await byMemory()).toBe(memory + 2);
    expect(await read(registry, 'webhook_inbox_duplicates_total', { answered_by: 'redis' })).toBe(0);
    const text = await registry.metrics();
    expect(text).toMatch(
      /webhook_inbox_handler_duration_seconds_count\{source="default",outcome="processed"\} \d+/,
    );
    expect(text).toMatch(/webhook_inbox_claim_to_commit_seconds_count\{source="default"\} [1-9]/);
    // No ids or keys as labels.
    expect(text).not.toContain(id);
  });

  it('reports held events and the oldest held age, gap timeouts, drains and sweeper runs', async () => {
    const key = uid('acct');
    expect((await send(uid('h'), 10, key, 3)).status).toBe(202);
    expect(await read(registry, 'webhook_inbox_held_events')).toBe(1);
    expect(await read(registry, 'webhook_inbox_oldest_held_age_seconds')).toBeGreaterThanOrEqual(0);
    const runs = await read(registry, 'webhook_inbox_sweeper_runs_total');
    const report = await app.inbox.sweep(); // gapTimeoutMs is 1: seqs 1-2 are skipped, seq 3 drains
    expect(report).toMatchObject({ gapsSkipped: 1, drained: 1 });
    expect(await read(registry, 'webhook_inbox_sweeper_runs_total')).toBe(runs + 1);
    expect(
      await read(registry, 'webhook_inbox_gap_timeouts_total', { action: 'skipped' }),
    ).toBeGreaterThanOrEqual(1);
    expect(await read(registry, 'webhook_inbox_drain_latency_seconds')).toBeGreaterThan(0);
    expect((await app.inbox.health()).held).toBe(0);
    expect((await getJson(`${app.url}/accounts/${key}`)).balance).toBe(10);
    expect(log.lines).toContainEqual(
      expect.objectContaining({
        level: 'info',
        msg: 'webhook-inbox: gap timeout, seqs skipped',
        obj: expect.objectContaining({ key, fromSeq: 1, toSeq: 2 }),
      }),
    );

    // Seq 1 arrives late: dead-lettered, counted and logged.
    const late = uid('late');
    const lateBefore = await read(registry, 'webhook_inbox_dead_letters_total', { reason: 'late' });
    expect((await send(late, 1, key, 1)).body).toMatchObject({ status: 'dead-lettered', reason: 'late' });
    expect(await read(registry, 'webhook_inbox_dead_letters_total', { reason: 'late' })).toBe(lateBefore + 1);
    expect(log.lines).toContainEqual(
      expect.objectContaining({ level: 'error', obj: expect.objectContaining({ id: late }) }),
    );
  });

  it('counts poison dead letters and logs the key it blocks; health counts them', async () => {
    const key = uid('poison');
    expect((await send(uid('ok'), 1, key, 1)).status).toBe(200);
    await fetch(`${app.url}/fail-next`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key }),
    });
    const before = await read(registry, 'webhook_inbox_dead_letters_total', { reason: 'poison' });
    const id = uid('p');
    expect((await send(id, 1, key, 2)).body).toMatchObject({ status: 'dead-lettered', reason: 'poison' });
    expect(await read(registry, 'webhook_inbox_dead_letters_total', { reason: 'poison' })).toBe(before + 1);
    expect(await read(registry, 'webhook_inbox_handler_duration_seconds', {})).toBeGreaterThan(0);
    expect(await read(registry, 'webhook_inbox_blocked_keys')).toBeGreaterThanOrEqual(1);
    expect(await read(registry, 'webhook_inbox_dead_letter_events')).toBeGreaterThanOrEqual(1);
    expect(log.lines).toContainEqual(
      expect.objectContaining({
        level: 'error',
        msg: expect.stringContaining('webhook-inbox: dead-lettered (poison)'),
        obj: expect.objectContaining({ id }),
      }),
    );
    expect(log.lines).toContainEqual(
      expect.objectContaining({
        level: 'info',
        msg: 'webhook-inbox: key blocked (poison)',
        obj: expect.objectContaining({ key }),
      }),
    );
    const health = await app.inbox.health();
    expect(health).toMatchObject({ ok: true, postgres: 'up', redis: 'disabled' });
    expect(health.blockedKeys).toBeGreaterThanOrEqual(1);
    expect(health.deadLetters).toBeGreaterThanOrEqual(2);
  });

  it('logs one debug line per delivery with its outcome', async () => {
    const id = uid('d');
    const from = log.lines.length;
    await send(id, 2);
    await send(id, 2);
    const lines = log.lines
      .slice(from)
      .filter((l) => l.level === 'debug' && l.msg === 'webhook-inbox: delivery');
    expect(lines.map((l) => [l.obj.id, l.obj.outcome, l.obj.status])).toEqual([
      [id, 'processed', 200],
      [id, 'duplicate', 200],
    ]);
  });

  it('records a span per delivery with outcome, source, key-present and seq; children for claim, handler and drain', async () => {
    exporter.reset();
    const key = uid('traced');
    expect((await send(uid('t2'), 5, key, 2)).status).toBe(202);
    expect((await send(uid('t1'), 1, key, 1)).status).toBe(200);
    await app.inbox.idle();
    const receives = spans('webhook-inbox.receive');
    expect(
      receives.map((s) => [s.attributes[SpanAttributes.outcome], s.attributes[SpanAttributes.seq]]),
    ).toEqual([
      ['held', 2],
      ['processed', 1],
    ]);
    for (const span of receives) {
      expect(span.attributes).toMatchObject({
        [SpanAttributes.source]: 'default',
        [SpanAttributes.keyPresent]: true,
      });
      expect(childrenOf(span, 'webhook-inbox.claim')).toHaveLength(1);
    }
    const [held, processed] = receives;
    expect(childrenOf(held, 'webhook-inbox.handler')).toHaveLength(0);
    expect(childrenOf(processed, 'webhook-inbox.handler')).toHaveLength(1);
    // The delivery that filled the gap drains seq 2 after its response: a child of its span.
    const [drain] = childrenOf(processed, 'webhook-inbox.drain');
    expect(drain.attributes[SpanAttributes.applied]).toBe(1);
    expect(childrenOf(drain, 'webhook-inbox.handler')).toHaveLength(1);

    exporter.reset();
    await post(url, { amount: 1 }, { 'Idempotency-Key': uid('u') });
    const [unordered] = spans('webhook-inbox.receive');
    expect(unordered.attributes[SpanAttributes.keyPresent]).toBe(false);
    expect(unordered.attributes[SpanAttributes.seq]).toBeUndefined();
  });

  it('GET <mount>/health answers 200 with the counts', async () => {
    const res = await fetch(`${url}/health`);
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(await res.json()).toMatchObject({
      ok: true,
      postgres: 'up',
      redis: 'disabled',
      held: 0,
      oldestHeldAgeMs: null,
    });
  });
});

describe.skipIf(!postgresUrl)('health when Postgres is down', () => {
  it('answers 503 with ok false, and the inbox recovers when Postgres is back', async () => {
    const proxy = await startTcpProxy(Number(new URL(postgresUrl!).port || 5432));
    await proxy.stop();
    const schema = uniqueName('wi');
    const db = new URL(postgresUrl!);
    db.host = `127.0.0.1:${proxy.port}`;
    const inbox = createInbox({
      db: db.toString(),
      schema,
      sweepIntervalMs: 0,
      handle: async () => ({ ok: true }),
    });
    try {
      expect(await inbox.health()).toEqual({
        ok: false,
        postgres: 'down',
        redis: 'disabled',
        held: null,
        oldestHeldAgeMs: null,
        blockedKeys: null,
        deadLetters: null,
        error: expect.stringContaining('ECONNREFUSED'),
      });
      expect((await inbox.healthOutcome()).status).toBe(503);
      const delivery = {
        headers: { 'idempotency-key': uid('x'), 'content-type': 'application/json' },
        rawBody: Buffer.from('{}'),
      };
      expect((await inbox.receive(delivery)).status).toBe(503);
      await proxy.start();
      // Postgres is back: the inbox opens on the next delivery instead of staying failed.
      expect((await inbox.receive(delivery)).body).toMatchObject({
        status: 'processed',
        result: { ok: true },
      });
      expect(await inbox.health()).toMatchObject({ ok: true, postgres: 'up', held: 0 });
    } finally {
      await inbox.close();
      await proxy.close();
      const admin = new pg.Client({ connectionString: postgresUrl! });
      await admin.connect();
      await admin.query(`drop schema if exists "${schema}" cascade`);
      await admin.end();
    }
  });
});

describe.each(FRAMEWORKS)('GET /webhooks/health and GET /metrics on %s', (framework) => {
  it('answers the inbox health, and the ledger serves the registry', async () => {
    const t = await (postgresTarget ?? targets[0]).open();
    const registry = new Registry();
    const app = await startLedger({
      testHooks: true,
      framework,
      ledgerSchema: t.appSchema,
      inbox: { db: t.db, schema: t.schema, sweepIntervalMs: 0, metrics: { registry } },
    });
    try {
      expect((await post(`${app.url}/webhooks`, { amount: 1 }, { 'Idempotency-Key': uid('f') })).status).toBe(
        200,
      );
      const res = await fetch(`${app.url}/webhooks/health`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(await res.json()).toMatchObject({ ok: true, postgres: 'up', redis: 'disabled', held: 0 });
      const metrics = await (await fetch(`${app.url}/metrics`)).text();
      expect(metrics).toMatch(/webhook_inbox_deliveries_total\{source="default",outcome="processed"\} 1/);
    } finally {
      await app.close();
      await t.close();
    }
  });
});

describe('an SDK installed after the inbox was made', () => {
  it('records spans from then on: the no-op tracer is noticed per delivery, never for good', async () => {
    const t = await (postgresTarget ?? targets[0]).open();
    const inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      handle: () => ({ ok: true }),
    });
    const deliver = (id: string) =>
      inbox.receive({
        headers: { 'idempotency-key': id, 'content-type': 'application/json' },
        rawBody: Buffer.from('{}'),
      });
    const exporter = new InMemorySpanExporter();
    try {
      expect((await deliver(uid('before'))).status).toBe(200);
      trace.setGlobalTracerProvider(
        new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
      );
      const id = uid('after');
      expect((await deliver(id)).status).toBe(200);
      const [receive] = exporter.getFinishedSpans().filter((s) => s.name === 'webhook-inbox.receive');
      expect(receive.attributes[SpanAttributes.eventId]).toBe(id);
      const handler = exporter.getFinishedSpans().filter((s) => s.name === 'webhook-inbox.handler');
      expect(handler.map((s) => s.parentSpanContext?.spanId)).toEqual([receive.spanContext().spanId]);
    } finally {
      trace.disable();
      await inbox.close();
      await t.close();
    }
  });
});
