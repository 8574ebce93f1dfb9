import { describe, expect, it } from 'vitest';
import { InboxOptionsError } from '../src/index.js';
import { createSender, InvalidEventError } from '../src/sender/index.js';

const endpoint = 'http://127.0.0.1:9/webhooks';

describe('sender options are checked at construction, naming the option', () => {
  it.each([
    [{ endpoint: 'ftp://x' }, 'endpoint'],
    [{ endpoint: 'not a url' }, 'endpoint'],
    [{}, 'endpoint'],
    [{ endpoint, concurrency: 0 }, 'concurrency'],
    [{ endpoint, timeoutMs: 1.5 }, 'timeoutMs'],
    [{ endpoint, maxAttempts: '3' }, 'maxAttempts'],
    [{ endpoint, baseMs: 100, capMs: 10 }, 'capMs'],
    [{ endpoint, breaker: { failureThreshold: 0 } }, 'breaker.failureThreshold'],
    [{ endpoint, breaker: { cooldown: 5 } }, 'breaker.cooldown'],
    [{ endpoint, breaker: 'on' }, 'breaker'],
    [{ endpoint, secret: 'hunter2' }, 'secret'],
    [{ endpoint, secret: 'whsec_' }, 'secret'],
    [{ endpoint, headers: { id: 'bad header' } }, 'headers.id'],
    [{ endpoint, headers: { key: 'idempotency-key' } }, 'headers'],
    [{ endpoint, schema: 'x' }, 'schema'],
    [{ endpoint, db: 'postgres://x', schema: 'Bad-Schema' }, 'schema'],
    [{ endpoint, db: 'postgres://x', timeoutMs: 5000, leaseMs: 5000 }, 'leaseMs'],
    [{ endpoint, random: 0.5 }, 'random'],
    [{ endpoint, retries: 3 }, 'retries'],
  ])('%j → %s', (options, option) => {
    let error: unknown;
    try {
      createSender(options as never);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(InboxOptionsError);
    expect((error as InboxOptionsError).option).toBe(option);
    expect((error as Error).message).toContain(`\`${option}\``);
  });

  it('never echoes a secret in the error', () => {
    expect(() => createSender({ endpoint, secret: 'whsec_!!not-base64!!' })).toThrow(/option `secret`/);
    try {
      createSender({ endpoint, secret: 'whsec_!!not-base64!!' });
    } catch (err) {
      expect((err as Error).message).not.toContain('not-base64');
    }
  });
});

describe('events are checked before they are stored, naming the field', () => {
  const sender = createSender({ endpoint, dispatch: false });
  it.each([
    [{ id: '' }, 'id'],
    [{ id: 'a\nb' }, 'id'],
    [{ key: ' padded ' }, 'key'],
    [{ seq: 1 }, 'seq'],
    [{ key: 'k', seq: 0 }, 'seq'],
    [{ key: 'k', seq: 1.5 }, 'seq'],
    [{ body: {}, rawBody: 'x' }, 'body'],
    [{ body: () => {} }, 'body'],
    [{ headers: { 'idempotency-key': 'x' } }, 'headers'],
    [{ headers: { 'x-ok': 'a\r\nb' } }, 'headers'],
  ])('%j → %s', async (event, field) => {
    const error = await sender.enqueue(event as never).catch((err) => err);
    expect(error).toBeInstanceOf(InvalidEventError);
    expect(error.field).toBe(field);
  });
});
