/** One HTTP request as the core sees it: header names in any case, the raw body bytes. */
export interface Delivery {
  readonly headers: Readonly<Record<string, string | readonly string[] | undefined>>;
  readonly rawBody: Uint8Array;
}

/** The bytes as a Buffer, without a copy. */
export function toBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Lower-cases header names; a repeated header's values are joined as Node joins them. */
export function normalizeHeaders(raw: Delivery['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in raw) {
    const value = raw[name];
    if (value === undefined) continue;
    out[name.toLowerCase()] = typeof value === 'string' ? value : (value as readonly string[]).join(', ');
  }
  return out;
}
