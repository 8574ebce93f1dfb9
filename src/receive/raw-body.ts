import { InvalidDeliveryError } from '../errors.js';

/** What the adapters hand over: a Node readable (IncomingMessage) or anything async-iterable of bytes. */
export type BodyStream = AsyncIterable<Uint8Array | string>;

/**
 * Reads a request body up to `limit` bytes. Past the limit it stops keeping bytes (memory
 * stays bounded) and throws a 413 InvalidDeliveryError; the caller answers with
 * `Connection: close`, so the rest of an oversized body is not read.
 */
export async function readRawBody(
  stream: BodyStream,
  limit: number,
  declaredLength?: string,
): Promise<Buffer> {
  if (declaredLength !== undefined && Number(declaredLength) > limit) {
    throw new InvalidDeliveryError('body', `body is larger than ${limit} bytes`, 413);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    const buf =
      typeof chunk === 'string'
        ? Buffer.from(chunk)
        : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    size += buf.length;
    if (size > limit) throw new InvalidDeliveryError('body', `body is larger than ${limit} bytes`, 413);
    chunks.push(buf);
  }
  return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
}
