/**
 * Without a `logger`, what goes wrong on a first deploy is said on stderr, one line each: a
 * handler that fails (once per event, with its id and key), a signature that does not verify
 * (once, with the hint about the Stripe CLI's own secret, which never reaches the response),
 * a database the inbox cannot reach (once per outage), and every dead letter. `logger: false`
 * says nothing.
 *
 * A process of its own (vitest.config.ts, OWN_PROCESS): it reads the process's stderr, which an
 * inbox of another file sharing the worker could write to.
 */
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { stripe } from '../src/delivery/providers.js';
import { createInbox, type Delivery, type Inbox, type InboxOptions, RejectEvent } from '../src/index.js';
import { freshPGlite, postgresTarget, postgresUrl } from './support/databases.js';
import { whsec } from './support/provider-deliveries.js';

let db: Awaited<ReturnType<typeof freshPGlite>>;
beforeAll(async () => {
  db = await freshPGlite();
  return () => db.close();
});

const inboxes: Inbox[] = [];
let stderr: string[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  await Promise.all(inboxes.splice(0).map((inbox) => inbox.close()));
});

/** Lines the inbox writes to stderr from now on (still written, so a failing run shows them). */
function captureStderr(): void {
  stderr = [];
  const write = process.stderr.write.bind(process.stderr);
  vi.spyOn(process.stderr, 'write').mockImplementation(((chunk: string | Uint8Array, ...rest: any[]) => {
    stderr.push(
      ...String(chunk)
        .split('\n')
        .filter((line) => line.includes('webhook-inbox')),
    );
    return write(chunk, ...rest);
  }) as typeof process.stderr.write);
}

let n = 0;
function open(options: Partial<InboxOptions>): Inbox {
  const inbox = createInbox({ db, schema: `loud_${++n}`, sweepIntervalMs: 0, handle: () => {}, ...options });
  inboxes.push(inbox);
  return inbox;
}

const delivery = (id: string, headers: Record<string, string> = {}): Delivery => ({
  headers: {
    'content-type': 'application/json',
    'idempotency-key': id,
    'x-key': 'acct-1',
    'x-seq': '1',
    ...headers,
  },
  rawBody: Buffer.from('{"amount":1}'),
});

async function failingHandler(options: Partial<InboxOptions>) {
  const inbox = open({
    ...options,
    handle: () => {
      throw new Error('downstream is down\nsecond line');
    },
  });
  await inbox.ready();
  captureStderr();
  const statuses = [];
  for (let i = 0; i < 2; i++) statuses.push((await inbox.receive(delivery('evt_fail'))).status);
  return statuses;
}

async function badSignature(options: Partial<InboxOptions>) {
  const inbox = open({ ...options, provider: stripe({ secret: whsec() }) });
  await inbox.ready();
  captureStderr();
  const body = JSON.stringify({ id: 'evt_1', type: 'charge.succeeded', data: { object: {} } });
  const headers = {
    'content-type': 'application/json',
    'stripe-signature': `t=${Math.floor(Date.now() / 1000)},v1=${'0'.repeat(64)}`,
  };
  for (let i = 0; i < 2; i++) {
    const outcome = await inbox.receive({ headers, rawBody: Buffer.from(body) });
    expect(outcome.status).toBe(401);
    expect(JSON.stringify(outcome.body)).not.toMatch(/whsec|stripe listen/);
  }
}

async function unreachableDatabase(options: Partial<InboxOptions>) {
  captureStderr();
  const inbox = open({ ...options, db: 'postgres://postgres@127.0.0.1:1/nowhere' });
  for (let i = 0; i < 2; i++) expect((await inbox.receive(delivery(`evt_db_${i}`))).status).toBe(503);
}

describe('without a logger, trouble is one line on stderr', () => {
  it('a failing handler: one WARN line for the event, with its id and key, not one per retry', async () => {
    expect(await failingHandler({})).toEqual([500, 500]);
    expect(stderr).toHaveLength(1);
    expect(stderr[0]).toMatch(/ WARN webhook-inbox: handler failed .*id=evt_fail key=acct-1 seq=1 /);
    expect(stderr[0]).toContain('err="Error: downstream is down\\nsecond line"');
  });

  it('a dead letter: one ERROR line with the event id, key and how to replay it', async () => {
    expect(await failingHandler({ maxAttempts: 2 })).toEqual([500, 200]);
    expect(stderr).toHaveLength(2);
    expect(stderr[1]).toMatch(
      / ERROR webhook-inbox: dead-lettered \(poison\).*webhook-inbox dead replay evt_fail.* id=evt_fail key=acct-1/,
    );
  });

  it('a rejected event: one ERROR line advising to skip and purge it, never to replay it', async () => {
    const inbox = open({
      handle: () => {
        throw new RejectEvent('amount must be an integer');
      },
    });
    await inbox.ready();
    captureStderr();
    expect((await inbox.receive(delivery('evt_rejected'))).status).toBe(422);
    expect(stderr.filter((line) => line.includes(' ERROR '))).toHaveLength(1);
    const line = stderr.find((l) => l.includes('dead-lettered'))!;
    expect(line).toMatch(
      / ERROR webhook-inbox: dead-lettered \(rejected\); the handler refused it for good \(RejectEvent\), so a replay would refuse it again: skip it to unblock its key \(`webhook-inbox dead skip evt_rejected`\), then purge it once read \(`webhook-inbox dead purge --all --reason rejected`\) /,
    );
    expect(line).not.toContain('dead replay');
  });

  it('a bad signature: one WARN line with the hint about the Stripe CLI secret (in the log only)', async () => {
    await badSignature({});
    expect(stderr).toHaveLength(1);
    expect(stderr[0]).toMatch(
      / WARN webhook-inbox: a signature did not verify \(401\).*`stripe listen` signs with its own whsec_ secret/,
    );
  });

  it('an unreachable database: one ERROR line, not one per delivery', async () => {
    await unreachableDatabase({});
    expect(stderr).toHaveLength(1);
    // Said by whichever met it first: the inbox's start, or a delivery.
    expect(stderr[0]).toMatch(/ ERROR webhook-inbox: (could not start|the database failed under a delivery)/);
    expect(stderr[0]).toContain('ECONNREFUSED');
  });
});

describe('a start that worked is one line too', () => {
  /** Constructs an inbox and waits for its start's line. */
  async function started(options: Partial<InboxOptions>): Promise<void> {
    captureStderr();
    await open(options).ready();
    await vi.waitFor(() => expect(stderr.some((line) => line.includes('ready'))).toBe(true));
  }

  it('one INFO line when the inbox is ready: its database, schema, source and mode', async () => {
    await started({ schema: 'loud_ready', source: 'stripe' });
    expect(stderr).toHaveLength(1);
    expect(stderr[0]).toMatch(
      / INFO webhook-inbox: ready source=stripe schema=loud_ready mode=inline db="a PGlite instance"$/,
    );
  });

  it.runIf(postgresUrl)("never the db URL's password nor its parameters", async () => {
    const t = await postgresTarget!.open();
    try {
      const url = new URL(postgresUrl!);
      url.username = 'postgres';
      url.password = 'hunter2-secret'; // trust authentication takes any password
      url.search = '?application_name=loud&password=hunter3';
      await started({ db: url.toString(), schema: t.schema });
      expect(stderr).toHaveLength(1);
      expect(stderr[0]).toContain(` db=postgres://postgres@${url.host}${url.pathname}`);
      expect(stderr[0]).not.toMatch(/hunter|application_name/);
    } finally {
      await Promise.all(inboxes.splice(0).map((inbox) => inbox.close()));
      await t.close();
    }
  });
});

describe('logger: false says nothing', () => {
  it('not for a failing handler, a bad signature, nor an unreachable database', async () => {
    await failingHandler({ logger: false });
    await badSignature({ logger: false });
    await unreachableDatabase({ logger: false });
    expect(stderr).toEqual([]);
  });

  it('nor that the inbox is ready', async () => {
    captureStderr();
    await open({ logger: false, schema: 'loud_ready_silent' }).ready();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(stderr).toEqual([]);
  });
});
