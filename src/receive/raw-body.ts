import { InvalidDeliveryError } from '../errors.js';

/** What the adapters hand over: a Node readable (IncomingMessage) or anything async-iterable of bytes. */
export type BodyStream = AsyncIterable<Uint8Array | string>;

/** A body being read: `started` settles at its first bytes (or its end, or its failure). */
export interface BodyRead {
  /** Settles (never rejects) when the first bytes arrive, the body ends, or reading fails. */
  readonly started: Promise<void>;
  /** The whole body; rejects with a 413 or 408 InvalidDeliveryError. */
  readonly body: Promise<Buffer>;
}

export interface BodyLimits {
  /** Most bytes kept; more is 413. */
  readonly maxBytes: number;
  /** How long the whole body may take, from now; longer is 408. */
  readonly timeoutMs: number;
  /** The request's Content-Length, if any: a declared size over the limit is 413 before reading. */
  readonly declaredLength?: string;
}

/**
 * Starts reading a request body, bounded in size and in time. Past `maxBytes` it stops keeping
 * bytes (memory stays bounded) and fails with 413; past `timeoutMs` it stops waiting and fails
 * with 408. Either way the caller answers with `Connection: close` (outcome.ts), so the rest
 * of the body is never read, and the stream is left for the server to close after the
 * response: destroying it here would reset the connection before the answer is written.
 */
export function startBodyRead(stream: BodyStream, limits: BodyLimits): BodyRead {
  let markStarted!: () => void;
  const started = new Promise<void>((resolve) => {
    markStarted = resolve;
  });
  const body = read(stream, limits, markStarted);
  body.then(markStarted, markStarted);
  // Handled here so that a body nobody waits for (the delivery was shed) is no unhandled rejection.
  body.catch(() => {});
  return { started, body };
}

async function read(stream: BodyStream, limits: BodyLimits, onFirstBytes: () => void): Promise<Buffer> {
  const { maxBytes, timeoutMs, declaredLength } = limits;
  if (declaredLength !== undefined && Number(declaredLength) > maxBytes) {
    throw new InvalidDeliveryError('body', `body is larger than ${maxBytes} bytes`, 413);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  const iterator = stream[Symbol.asyncIterator]();
  try {
    for (;;) {
      const next = iterator.next();
      const step = await Promise.race([next, timedOut]);
      if (step === 'timeout') {
        // Settles when the server closes the connection after the 408.
        next.catch(() => {});
        throw new InvalidDeliveryError('body', `body was not received within ${timeoutMs} ms`, 408);
      }
      if (step.done) break;
      onFirstBytes();
      const chunk = step.value;
      const buf =
        typeof chunk === 'string'
          ? Buffer.from(chunk)
          : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      size += buf.length;
      if (size > maxBytes)
        throw new InvalidDeliveryError('body', `body is larger than ${maxBytes} bytes`, 413);
      chunks.push(buf);
    }
  } finally {
    clearTimeout(timer);
  }
  return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
}
