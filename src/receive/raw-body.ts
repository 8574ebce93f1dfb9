import { InvalidDeliveryError } from '../errors.js';

export type BodyStream = AsyncIterable<Uint8Array | string>;

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

/** Read and dropped past a 413: closing a socket with unread bytes resets it before the 413 is read. */
export const DRAIN_LIMIT_BYTES = 16 * 1024 * 1024;

/** Reads a body bounded in size (413) and time (408), leaving the stream for the server to close. */
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

function tooSlow(timeoutMs: number): InvalidDeliveryError {
  return new InvalidDeliveryError('body', `body was not received within ${timeoutMs} ms`, 408);
}

function tooLarge(maxBytes: number, draining = false): InvalidDeliveryError {
  const err = new InvalidDeliveryError('body', `body is larger than ${maxBytes} bytes`, 413);
  err.draining = draining;
  return err;
}

/** Drops the rest of an oversized body; past {@link DRAIN_LIMIT_BYTES} or `timeoutMs`, destroys it. */
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

/** {@link read} for a Node readable, on its events: cheaper than an async iterator's promise per chunk. */
function readNode(stream: NodeReadable, limits: BodyLimits, onFirstBytes: () => void): Promise<Buffer> {
  const { maxBytes, timeoutMs, declaredLength } = limits;
  if (declaredLength !== undefined && Number(declaredLength) > maxBytes) {
    if (Number(declaredLength) > DRAIN_LIMIT_BYTES || stream.readableEnded)
      return Promise.reject(tooLarge(maxBytes));
    drainNode(stream, 0, timeoutMs);
    return Promise.reject(tooLarge(maxBytes, true));
  }
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
    const onClose = () => {
      if (stream.readableEnded) return;
      done(Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }));
    };
    const timer = setTimeout(() => done(tooSlow(timeoutMs)), timeoutMs);
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
  if (declaredLength !== undefined && Number(declaredLength) > maxBytes) throw tooLarge(maxBytes);
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
        throw tooSlow(timeoutMs);
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
