/** A failed run's cause: a hash of its error's type and message with what varies per event taken out. */
import { createHash } from 'node:crypto';

export function normalisedMessage(message: string): string {
  return message
    .slice(0, 2000)
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '<v>')
    .replace(/\b[a-z][a-z0-9+.-]*:\/\/\S+/gi, '<url>')
    .replace(/[^\s@]+@[^\s@]+\.[a-z]{2,}/gi, '<email>')
    .replace(/\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi, '<uuid>')
    .replace(/\b(?=[0-9a-z_]*\d)[a-z]{1,8}_[0-9a-z]{6,}\b/gi, '<id>')
    .replace(/\b0x[0-9a-f]+\b|\b[0-9a-f]{16,}\b/gi, '<hex>')
    .replace(/\d+(?:\.\d+)?/g, '<n>')
    .replace(/\s+/g, ' ')
    .trim();
}

function typeOf(err: unknown): string {
  if (!(err instanceof Error)) return typeof err;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' || typeof code === 'number' ? `${err.name}[${code}]` : err.name;
}

/** The fingerprint of a failed run's error: 12 hex characters (48 bits of SHA-256). */
export function causeOf(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return createHash('sha256')
    .update(`${typeOf(err)}\n${normalisedMessage(message)}`)
    .digest('hex')
    .slice(0, 12);
}
