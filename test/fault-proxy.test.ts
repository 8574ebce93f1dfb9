import { afterEach, describe, expect, it } from 'vitest';
import { createFaultProxy, type FaultRates } from '../src/testing/index.js';
import { recordingServer } from './support/recording-server.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => {});
});

async function setup(rates: FaultRates, seed = 1, maxDelayMs = 20) {
  const server = await recordingServer();
  cleanups.push(server.close);
  const proxy = await createFaultProxy({
    target: new URL(server.url).origin,
    rates,
    seed,
    maxDelayMs,
    dropModes: ['reset', '502'],
  });
  cleanups.push(() => proxy.close());
  return { server, proxy };
}

async function post(url: string, id: string): Promise<number | 'reset'> {
  try {
    const res = await fetch(`${url}/webhooks`, {
      method: 'POST',
      headers: { 'idempotency-key': id, 'content-type': 'application/json' },
      body: JSON.stringify({ id }),
    });
    await res.text();
    return res.status;
  } catch {
    return 'reset';
  }
}

describe('fault proxy', () => {
  it('is reproducible: the same seed gives the same faults, request by request', async () => {
    const rates = { drop: 0.15, dropResponse: 0.15, duplicate: 0.15, error: 0.15 };
    const runs = [];
    for (const seed of [7, 7, 8]) {
      const { proxy, server } = await setup(rates, seed);
      const seen: Array<number | 'reset'> = [];
      for (let i = 0; i < 40; i++) seen.push(await post(proxy.url, `r${i}`));
      await proxy.idle();
      runs.push({ seen, injected: proxy.stats().injected, upstream: server.arrivals.length });
    }
    expect(runs[1]).toEqual(runs[0]);
    expect(runs[2].seen).not.toEqual(runs[0].seen);
    const { injected } = runs[0];
    expect(injected.drop + injected['drop-response'] + injected.duplicate + injected.error).toBeGreaterThan(
      0,
    );
  });

  it('drops a response only after the consumer processed the request', async () => {
    const { proxy, server } = await setup({ dropResponse: 1 });
    expect(await post(proxy.url, 'a')).toBe('reset');
    expect(server.arrivals.map((a) => a.id)).toEqual(['a']);
    expect(proxy.stats()).toMatchObject({ injected: { 'drop-response': 1 }, outcomes: { processed: 1 } });
  });

  it('drops requests before the consumer, and injects 500s without reaching it', async () => {
    const dropped = await setup({ drop: 1 });
    for (let i = 0; i < 6; i++) expect([502, 'reset']).toContain(await post(dropped.proxy.url, `d${i}`));
    expect(dropped.server.arrivals).toHaveLength(0);
    expect(dropped.proxy.stats().injected.drop).toBe(6);
    const failing = await setup({ error: 1 });
    expect(await post(failing.proxy.url, 'e')).toBe(500);
    expect(failing.server.arrivals).toHaveLength(0);
    expect(failing.proxy.stats().injected.error).toBe(1);
  });

  it('duplicates deliveries: the consumer sees the request twice, the sender one answer', async () => {
    const { proxy, server } = await setup({ duplicate: 1 });
    expect(await post(proxy.url, 'x')).toBe(200);
    await proxy.idle();
    expect(server.arrivals.map((a) => a.id)).toEqual(['x', 'x']);
    expect(proxy.stats()).toMatchObject({ forwarded: 2, injected: { duplicate: 1 } });
  });

  it('reorders: a held request is overtaken by a later one', async () => {
    const { proxy, server } = await setup({ reorder: 1 }, 1, 10_000);
    const first = post(proxy.url, 'first');
    while (proxy.stats().requests < 1) await new Promise((resolve) => setTimeout(resolve, 5));
    proxy.setRates({});
    expect(await post(proxy.url, 'second')).toBe(200);
    expect(await first).toBe(200);
    expect(server.arrivals.map((a) => a.id)).toEqual(['second', 'first']);
    expect(proxy.stats().injected.reorder).toBe(1);
  });

  it('rejects a bad rate, naming it', async () => {
    await expect(createFaultProxy({ target: 'http://127.0.0.1:1', rates: { drop: 2 } })).rejects.toThrow(
      /rate `drop` must be a number from 0 to 1/,
    );
    await expect(
      createFaultProxy({ target: 'http://127.0.0.1:1', rates: { lose: 0.1 } as never }),
    ).rejects.toThrow(/unknown rate `lose`/);
  });
});
