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
 * How much of an oversized body is still read, and dropped, after its 413 is decided, so that a
 * sender still writing reads the answer: a socket closed with unread bytes in it is reset by
 * the kernel, and the reset discards the 413 from the sender's buffer before it reads it (the
 * Koa ledger's 2 MiB posts failed with EPIPE 3 times in 20). Past this bound (or past
 * `bodyTimeoutMs`), the connection is closed.
 */
export const DRAIN_LIMIT_BYTES = 16 * 1024 * 1024;

/**
 * Starts reading a request body, bounded in size and in time. Past `maxBytes` it stops keeping
 * bytes (memory stays bounded) and fails with 413, and drops the rest as it arrives, up to
 * {@link DRAIN_LIMIT_BYTES} (the 413 keeps the connection open: `draining`); a body declared
 * bigger than that is answered with `Connection: close` and not read. Past `timeoutMs` it stops
 * waiting and fails with 408 (`Connection: close`, outcome.ts): the stream is left for the
 * server to close after the response, since destroying it here would reset the connection
 * before the answer is written.
 */
export function startBodyRead(stream: BodyStream, limits: BodyLimits): BodyRead {
  let markStarted!: () => void;
  const started = new Promise<void>((resolve) => {
    markStarted = resolve;
  });
  const body = isNodeReadable(stream)
    ? readNode(stream, limits, markStarted)
    : read(stream, limits, markStarted);
  body.then(markStarted, markStarted);
  // Handled here so that a body nobody waits for (the delivery was shed) is no unhandled rejection.
  body.catch(() => {});
  return { started, body };
}

/** The part of a Node readable (IncomingMessage, a fastify raw stream) that {@link readNode} uses. */
interface NodeReadable {
  on(event: string, listener: (...args: any[]) => void): unknown;
  removeListener(event: string, listener: (...args: any[]) => void): unknown;
  pause(): unknown;
  resume?(): unknown;
  destroy?(): unknown;
  readonly readableEnded?: boolean;
}

function isNodeReadable(stream: BodyStream): stream is BodyStream & NodeReadable {
  const s = stream as Partial<NodeReadable>;
  return (
    typeof s.on === 'function' && typeof s.removeListener === 'function' && typeof s.pause === 'function'
  );
}

function tooLarge(maxBytes: number, draining = false): InvalidDeliveryError {
  const err = new InvalidDeliveryError('body', `body is larger than ${maxBytes} bytes`, 413);
  err.draining = draining;
  return err;
}

/**
 * Drops the rest of an oversized body as it arrives (`read` bytes of it seen so far), so that
 * the connection can be answered and kept; past {@link DRAIN_LIMIT_BYTES} or `timeoutMs`, it
 * is destroyed (the sender gets a reset: bounded work beats reading without end).
 */
function drainNode(stream: NodeReadable, read: number, timeoutMs: number): void {
  let dropped = read;
  const stop = (destroy: boolean) => {
    clearTimeout(timer);
    stream.removeListener('data', onData);
    stream.removeListener('end', onEnd);
    stream.removeListener('close', onEnd);
    if (destroy) stream.destroy?.();
  };
  const onData = (chunk: Buffer | string) => {
    dropped += chunk.length;
    if (dropped > DRAIN_LIMIT_BYTES) stop(true);
  };
  const onEnd = () => stop(false);
  const timer = setTimeout(() => stop(true), timeoutMs);
  timer.unref();
  stream.on('data', onData);
  stream.on('end', onEnd);
  stream.on('close', onEnd);
  stream.resume?.();
}

/**
 * {@link read} for a Node readable, with its own events: the async iterator costs a promise,
 * an iterator result and a `Promise.race` per chunk, which the profile of a small delivery
 * showed as a tenth of the adapter's work. Same limits, same errors; on 413 or 408 the stream
 * is paused and left to the server, as there.
 */
function readNode(stream: NodeReadable, limits: BodyLimits, onFirstBytes: () => void): Promise<Buffer> {
  const { maxBytes, timeoutMs, declaredLength } = limits;
  if (declaredLength !== undefined && Number(declaredLength) > maxBytes) {
    if (Number(declaredLength) > DRAIN_LIMIT_BYTES || stream.readableEnded)
      return Promise.reject(tooLarge(maxBytes));
    drainNode(stream, 0, timeoutMs);
    return Promise.reject(tooLarge(maxBytes, true));
  }
  // Read to the end already (by what came before the inbox): no 'end' will come.
  if (stream.readableEnded) return Promise.resolve(Buffer.alloc(0));
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (err: Error | undefined) => {
      clearTimeout(timer);
      stream.removeListener('data', onData);
      stream.removeListener('end', onEnd);
      stream.removeListener('error', onFail);
      stream.removeListener('close', onClose);
      if (err === undefined) resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
      else {
        if (!(err instanceof InvalidDeliveryError && err.draining)) stream.pause();
        reject(err);
      }
    };
    const onData = (chunk: Buffer | string) => {
      onFirstBytes();
      const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      size += buf.length;
      if (size > maxBytes) {
        done(tooLarge(maxBytes, true));
        drainNode(stream, size, timeoutMs);
        return;
      }
      chunks.push(buf);
    };
    const onEnd = () => done(undefined);
    const onFail = (err: Error) => done(err);
    // A client that goes away mid-body: the iterator's ERR_STREAM_PREMATURE_CLOSE, kept.
    const onClose = () => {
      if (stream.readableEnded) return;
      done(Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }));
    };
    const timer = setTimeout(
      () => done(new InvalidDeliveryError('body', `body was not received within ${timeoutMs} ms`, 408)),
      timeoutMs,
    );
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onFail);
    stream.on('close', onClose);
  });
}

/** {@link drainNode} for an async iterable (a fetch Request's body). */
function drainIterator(iterator: AsyncIterator<Uint8Array | string>, read: number, timeoutMs: number): void {
  const deadline = Date.now() + timeoutMs;
  void (async () => {
    let dropped = read;
    for (;;) {
      const step = await iterator.next();
      if (step.done) return;
      dropped += step.value.length;
      if (dropped > DRAIN_LIMIT_BYTES || Date.now() > deadline) {
        await iterator.return?.();
        return;
      }
    }
  })().catch(() => {});
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
      if (size > maxBytes) {
        drainIterator(iterator, size, timeoutMs);
        throw tooLarge(maxBytes, true);
      }
      chunks.push(buf);
    }
  } finally {
    clearTimeout(timer);
  }
  return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
}
