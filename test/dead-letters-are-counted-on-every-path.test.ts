/**
 * A poison event is counted in `webhook_inbox_dead_letters_total{reason="poison"}` and logged
 * (with "key blocked" for an ordered key) whichever path applied it: the inline receive, a drain
 * after a response, the sweeper's pending path, a deferred worker's unordered path and its
 * ordered path. Before the apply path was one, the workers and the sweeper logged it but did
 * not count it. On each, `onDeadLetter` is told once, with the cause, after COMMIT (what it
 * reads of the event is already `dead`); a hook that throws is logged and changes nothing.
 */
import { readFileSync } from 'node:fs';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { deadLetterAlerts } from '../examples/alerts/dead-letter-alerts.js';
import { createInbox, type Inbox, type InboxOptions } from '../src/index.js';
import { targets } from './support/databases.js';
import { perTestSchemas } from './support/per-test-schemas.js';
import { recordingServer } from './support/recording-server.js';

interface LogLine {
  msg: string;
  obj: Record<string, unknown>;
}

function delivery(id: string, body: object, order?: { key: string; seq: number }) {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'idempotency-key': id };
  if (order) {
    headers['x-key'] = order.key;
    headers['x-seq'] = String(order.seq);
  }
  return { headers, rawBody: Buffer.from(JSON.stringify(body)) };
}

describe.each(targets)('dead letters are counted on every path ($name)', (target) => {
  const database = perTestSchemas(target);
  let inbox: Inbox | undefined;
  let registry: Registry;
  let lines: LogLine[];
  /** What `onDeadLetter` was told, and the event's status as the hook read it. */
  let told: Array<Promise<{ id: string; reason: string; fingerprint: string | null; status?: string }>>;

  afterEach(async () => {
    await inbox?.close();
    inbox = undefined;
  });

  /** An inbox whose handler throws for every body with `poison: true`. */
  async function open(options: Partial<InboxOptions> = {}): Promise<Inbox> {
    const t = database();
    registry = new Registry();
    lines = [];
    told = [];
    const log = (obj: object, msg?: string) =>
      lines.push({ obj: obj as Record<string, unknown>, msg: msg ?? '' });
    inbox = createInbox({
      db: t.db,
      schema: t.schema,
      sweepIntervalMs: 0,
      maxAttempts: 1,
      retryBaseMs: 1,
      retryCapMs: 1,
      metrics: { registry },
      logger: { debug: () => {}, info: log, warn: log, error: log },
      handle: (event) => {
        if ((event.body as { poison?: boolean }).poison) throw new Error('poison');
        return undefined;
      },
      onDeadLetter: (event, cause) => {
        told.push(
          inbox!.event(event.id).then((row) => ({
            id: event.id,
            reason: event.reason,
            fingerprint: cause.fingerprint,
            status: row?.status,
          })),
        );
      },
      ...options,
    });
    await inbox.ready();
    return inbox;
  }

  async function poisonCount(): Promise<number> {
    const metric = registry.getSingleMetric('webhook_inbox_dead_letters_total');
    const { values } = await metric!.get();
    return values.filter((v) => v.labels.reason === 'poison').reduce((sum, v) => sum + v.value, 0);
  }

  const logged = (msg: string, id?: string) =>
    lines.filter((l) => l.msg.startsWith(msg) && (id === undefined || l.obj.id === id)).length;

  /** onDeadLetter was told of `id` once, as poison, with the fingerprint of Error('poison'), after COMMIT. */
  async function toldOnce(id: string): Promise<void> {
    const calls = await Promise.all(told);
    expect(calls).toEqual([
      { id, reason: 'poison', fingerprint: expect.stringMatching(/^[0-9a-f]{12}$/), status: 'dead' },
    ]);
    expect((await inbox!.deadLetter(id)).cause).toBe(calls[0]!.fingerprint);
  }

  it('the inline receive', async () => {
    const i = await open();
    const outcome = await i.receive(delivery('inline-1', { poison: true }));
    expect(outcome.body).toMatchObject({ status: 'dead-lettered', reason: 'poison' });
    expect(await poisonCount()).toBe(1);
    expect(logged('webhook-inbox: dead-lettered (poison)', 'inline-1')).toBe(1);
    await toldOnce('inline-1');
  });

  it('an onDeadLetter that throws (or rejects) is logged and changes nothing', async () => {
    const i = await open({
      onDeadLetter: (event) => {
        if (event.id === 'throws') throw new Error('slack is down');
        return Promise.reject(new Error('pagerduty is down'));
      },
    });
    const first = await i.receive(delivery('throws', { poison: true }));
    const second = await i.receive(delivery('rejects', { poison: true }));
    expect([first.body, second.body]).toMatchObject([
      { status: 'dead-lettered' },
      { status: 'dead-lettered' },
    ]);
    await expect.poll(() => logged('webhook-inbox: onDeadLetter threw')).toBe(2);
    expect(lines.filter((l) => l.msg === 'webhook-inbox: onDeadLetter threw').map((l) => l.obj.id)).toEqual([
      'throws',
      'rejects',
    ]);
    expect((await i.receive(delivery('fine', {}))).kind).toBe('processed');
    expect(await poisonCount()).toBe(2);
  });

  it('a drain after the response, which also blocks the key', async () => {
    const i = await open();
    expect((await i.receive(delivery('drain-2', { poison: true }, { key: 'k', seq: 2 }))).kind).toBe('held');
    expect((await i.receive(delivery('drain-1', {}, { key: 'k', seq: 1 }))).kind).toBe('processed');
    await i.idle();
    expect((await i.event('drain-2'))?.status).toBe('dead');
    expect(await poisonCount()).toBe(1);
    expect(logged('webhook-inbox: dead-lettered (poison)', 'drain-2')).toBe(1);
    await toldOnce('drain-2');
    expect(logged('webhook-inbox: key blocked (poison)')).toBe(1);
  });

  it("the sweeper's pending path", async () => {
    const i = await open({ maxAttempts: 2 });
    // The first run fails inline and is counted; the sweeper's retry is the second and last.
    expect((await i.receive(delivery('swept-1', { poison: true }))).status).toBe(500);
    expect(await poisonCount()).toBe(0);
    // retryCapMs 1: the full-jitter backoff is 0 ms, so the retry is due at once.
    expect((await i.sweep()).applied).toBe(0);
    expect((await i.event('swept-1'))?.status).toBe('dead');
    expect(await poisonCount()).toBe(1);
    expect(logged('webhook-inbox: dead-lettered (poison)', 'swept-1')).toBe(1);
    await toldOnce('swept-1');
  });

  it("a deferred worker's unordered path", async () => {
    const i = await open({ mode: 'deferred', workers: 1, pollIntervalMs: 20 });
    expect((await i.receive(delivery('worker-1', { poison: true }))).kind).toBe('pending');
    await i.idle();
    expect((await i.event('worker-1'))?.status).toBe('dead');
    expect(await poisonCount()).toBe(1);
    expect(logged('webhook-inbox: dead-lettered (poison)', 'worker-1')).toBe(1);
    await toldOnce('worker-1');
  });

  it("a deferred worker's ordered path, which also blocks the key", async () => {
    const i = await open({ mode: 'deferred', workers: 1, pollIntervalMs: 20 });
    expect((await i.receive(delivery('turn-1', { poison: true }, { key: 'k', seq: 1 }))).kind).toBe(
      'pending',
    );
    await i.idle();
    expect((await i.event('turn-1'))?.status).toBe('dead');
    expect(await poisonCount()).toBe(1);
    expect(logged('webhook-inbox: dead-lettered (poison)', 'turn-1')).toBe(1);
    await toldOnce('turn-1');
    expect(logged('webhook-inbox: key blocked (poison)')).toBe(1);
    expect((await i.keyState('k'))?.state).toBe('blocked');
  });

  it("docs/operations.md's Slack and PagerDuty recipe: a message per dead letter, one incident per cause", async () => {
    const server = await recordingServer();
    try {
      const base = server.url.replace('/webhooks', '');
      const i = await open({
        onDeadLetter: deadLetterAlerts({
          slackWebhookUrl: `${base}/slack`,
          pagerDutyRoutingKey: 'routing-key',
          pagerDutyUrl: `${base}/pagerduty`,
        }),
      });
      await i.receive(delivery('alert-1', { poison: true }));
      await i.receive(delivery('alert-2', { poison: true }));
      // Bounded: a hook that never sends fails here, not at the suite's timeout.
      await expect.poll(() => server.arrivals.length, { timeout: 10_000 }).toBe(4);
      const bodies = (path: string) =>
        server.arrivals.filter((a) => a.url === path).map((a) => JSON.parse(a.body.toString()));
      const cause = (await i.deadLetter('alert-1')).cause;
      expect(
        bodies('/slack')
          .map((b) => b.text)
          .sort(),
      ).toEqual(
        ['alert-1', 'alert-2'].map((id) =>
          expect.stringContaining(`default/${id} dead-lettered (poison, cause ${cause}): Error: poison`),
        ),
      );
      expect(bodies('/pagerduty').map((b) => [b.routing_key, b.event_action, b.dedup_key])).toEqual([
        ['routing-key', 'trigger', `webhook-inbox:default:${cause}`],
        ['routing-key', 'trigger', `webhook-inbox:default:${cause}`],
      ]);
    } finally {
      await server.close();
    }
    // The page shows the file as it is, imports as a user writes them.
    const file = readFileSync('examples/alerts/dead-letter-alerts.ts', 'utf8').replace(
      "'../../src/index.js'",
      "'webhook-inbox'",
    );
    expect(readFileSync('docs/operations.md', 'utf8')).toContain(file.trim());
  });
});
